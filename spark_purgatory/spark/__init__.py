"""The Spark host: routes rows into the engine and its output back out; it decides nothing.

Modules, in the order a row meets them:

* ``formats``: what a source path holds, told by its files (Parquet, JSON lines, a Delta
  table), and the streams that read it.
* ``schema``: what a typed input must look like, checked when the query is built.
* ``sources``: read operations and events (JSON lines, Kafka, or typed columns: Parquet,
  Delta, any DataFrame with the contract's columns), parse and validate them in Spark SQL; a
  bad row gets a reason from ``contract.REASONS``.
* ``routing``: each parsed row to the shard that owns its keys, with the stubs and replicas
  of cross-shard operations (the design is explained there).
* ``routed_rows``: the routed row's one schema, its roles, the columns roles share, and the
  projection every route ends in.
* ``labels``: the group key per shard, chosen so that Spark's hash partitioner gives every
  shard its own partition.
* ``operator``: ``purgatory_stream`` / ``purgatory_batch``: a watermark per input, and the shard step
  that runs the engine once per shard per micro-batch inside ``applyInPandasWithState``.
* ``output``: the operator's one output schema and its split into the contract's tables.
* ``metrics``: per-micro-batch figures through ``observe`` and a query listener.
* ``session``: a local SparkSession configured for the operator.

Invariant: every column and name comes from ``spark_purgatory.contract``; the engine sees
only validated pandas frames.
"""
