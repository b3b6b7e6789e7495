"""The engine: Kafka's delayed-operation purgatory and timing wheel, for event time, on columns.

Plain numpy code (pandas where frames come in and go out) that runs without Spark, Delta
or a filesystem, one concept per module:

* ``purgatory``: ``Purgatory``, a shard's engine as its host sees it: one call per micro-batch
  (``process``), its sizes, and what a state layer reads and gives back;
* ``delayed``: ``DelayedOperations``, Kafka's operations (tryCompleteElseWatch and
  checkAndComplete as watch, then try_complete; advance, force_complete / on_complete, purge)
  over whole micro-batches;
* ``wheel``: ``TimingWheel``, Kafka's hierarchical timing wheel, advanced by the watermark;
* ``conditions``: when an operation's condition holds, and at which event time;
* ``watchers``: Kafka's Watchers as a hash-join index of (key, operation);
* ``progress``: key progress and event finalisation (``unmatched_events``);
* ``dedup``: op_id memory for ``duplicate_op_id``;
* ``validation`` / ``batch``: the input a batch accepts, the rows it returns;
* ``pending`` / ``columns``: the pending operations and watchers in numpy columns with
  spare capacity, tombstones and hash indexes;
* ``rows``: ``Rows``, named numpy columns, what a call works on between its input and
  output frames;
* ``tables``: the shard's tables and the change log a state layer reads;
* ``arrays``: the array steps a call is made of (sorted searches, joins by hash, membership);
  ``frames``: the pandas frames of its edges (built, stacked, filtered, concatenated);
* ``collector``: the garbage collector paused around a call; ``memory``: big arrays in their
  own mappings, and the allocators' memory handed back after bulk work.

Invariants: every valid operation gets exactly one outcome, never before its condition holds
or its deadline passes; the engine imports nothing from Spark, Delta or
``spark_purgatory.state``: persistence reads it (``Purgatory.tables``, ``take_changes``).
"""
