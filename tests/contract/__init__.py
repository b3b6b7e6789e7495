"""The input contract, declared once (``spark_purgatory.contract``), against every path that reads input."""
