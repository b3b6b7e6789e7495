"""The Delta output: the operator's rows, batched Kafka-producer style, committed exactly once.

* ``accumulator`` -- ``RecordAccumulator``: durable per-(table, partition) staging, drained
  by ``batch.size``, ``linger.ms``, ``buffer.memory`` and on close;
* ``writers`` -- ``DeltaRsWriter`` and ``SparkDeltaWriter`` (one ``TableWriter`` contract),
  ``choose_writer``, ``maintain_tables``;
* ``sink`` -- ``PurgatorySink``, the ``foreachBatch`` function, and ``split_tables``.

Staging and tables may be paths or URIs (``s3://``, ``abfss://``, ``dbfs:/`` ...), reached
through ``spark_purgatory.storage`` with the ``storage.*`` settings.

Invariants: nothing staged is lost and nothing is committed twice, across crashes and
replayed micro-batches (app transactions); the tables' columns are ``contract.TABLES``'.
This package knows the operator only through ``contract.OPERATOR_OUTPUT``: no Spark schema,
no engine.  ``spark_purgatory.start`` wires it; the pieces stay public for users' own sinks.
"""
