"""The Delta output (``spark_purgatory.delta``): accumulator, writers, object stores, crashes."""
