"""The engine: Kafka's delayed-operation purgatory and timing wheel, for event time, on columns.

Plain numpy code (pandas where frames come in and go out) that runs without Spark, Delta or
a filesystem.

Invariant: the engine imports nothing from Spark, Delta or ``spark_purgatory.state``:
persistence reads it (``Purgatory.tables``, ``take_changes``).
"""
