"""The Spark host (``spark_purgatory.spark``): the operator on real Spark, its sources and checks."""
