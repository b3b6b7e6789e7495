package io.sparkpurgatory.sink;

/**
 * What the driver's Python gives {@link StagedRowsSink} to take a micro-batch's rows: implemented
 * in Python (spark_purgatory/runtime/staged_sink.py) and called back through Py4J.
 */
public interface BatchCommitter {

  /**
   * A micro-batch's write begins, before any of its tasks runs (a throw fails it before it does
   * anything, as a {@code foreachBatch} function's throw does: how a stopping query refuses it).
   */
  void begin();

  /**
   * Takes micro-batch {@code batchId}'s rows, every task's, as JSON columns (the text {@link
   * SmallRows#columns} writes); called once all its tasks succeeded, before Spark records the
   * micro-batch as done.  A throw fails the micro-batch ({@link #abort} follows).
   */
  void commit(long batchId, String columns);

  /** Micro-batch {@code batchId}'s write failed after {@link #begin} (a task, or the commit). */
  void abort(long batchId);
}
