package io.sparkpurgatory.sink;

/**
 * What the driver's Python gives {@link StagedRowsSink} to take a micro-batch's rows: implemented
 * in Python (spark_purgatory/runtime/staged_sink.py) and called back through Py4J.
 */
public interface BatchCommitter {

  /**
   * Takes micro-batch {@code batchId}'s rows, every task's, as JSON columns (the text {@link
   * SmallRows#columns} writes); called once all its tasks succeeded, before Spark records the
   * micro-batch as done.  A throw fails the micro-batch.
   */
  void commit(long batchId, String columns);
}
