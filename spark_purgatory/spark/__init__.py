"""The Spark host: routes rows into the engine and its output back out; it decides nothing.

Invariant: every column and name comes from ``spark_purgatory.contract``; the engine sees
only validated pandas frames.
"""
