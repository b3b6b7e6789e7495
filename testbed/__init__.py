"""What the tests and the benchmarks both stand on, outside the package and its wheel:
servers on loopback (``services``: moto's S3 server, a fault-injecting proxy in front of it,
pyspark's Spark Connect server and a standalone cluster's environment) and the wheel installed
as a user gets it (``wheel``).  ``tests/`` and ``benchmarks/`` import it; it imports neither,
and nothing of ``spark_purgatory`` imports it."""
