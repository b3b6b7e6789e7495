"""The Delta output: the operator's rows, batched Kafka-producer style, committed exactly once.

* ``staging`` -- the producer's side, on the executors: ``split_tables`` (operator rows to
  table rows) and ``stage_task``, one staged Parquet file per (destination, batch, task);
* ``accumulator`` -- ``RecordAccumulator``, the driver's bookkeeping: staged manifests,
  ``ready()`` by ``batch.size``, ``linger.ms``, ``buffer.memory`` and on close, and the
  drain with its crash recovery;
* ``sender`` -- the drain's tasks, on the executors: staged files to Delta data files of
  about ``batch.size`` and their add actions (``SparkTasks`` runs them as one Spark job);
* ``writers`` -- ``DeltaRsWriter`` and ``SparkDeltaWriter`` (one ``TableWriter`` contract),
  ``choose_writer``, ``maintain_tables``;
* ``sink`` -- ``PurgatorySink``, a micro-batch's output (the design, in Kafka's terms); what the
  input needs after it is the driver's control plane, not this package's
  (``handoff.control``, run by ``driver_step.DriverStep``).

Staging and tables may be paths or URIs (``s3://``, ``abfss://``, ``dbfs:/`` ...), reached
through ``spark_purgatory.storage`` with the ``storage.*`` settings.

Invariants: no output row passes through the driver (it sees file names, sizes and
statistics); nothing staged is lost and nothing is committed twice, across crashes and
replayed micro-batches (app transactions); the tables' columns are ``contract.TABLES``'.
This package knows the operator only through ``contract.OPERATOR_OUTPUT``: no Spark schema,
no engine.  ``spark_purgatory.start`` wires it; the pieces stay public for users' own sinks.
"""
