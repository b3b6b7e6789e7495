package io.sparkpurgatory.checks;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF7;

/**
 * A typed completion event's checks in one function: what spark_purgatory/spark/sources.py
 * writes as SQL for typed events (the reasons in the contract's order; op_id and source
 * blank read as absent), for Catalyst one expression node.
 *
 * <p>Arguments (SQL, in order): key, ts_ms (null when unreadable), ts is null, the latest
 * event time accepted (null: no ts_in_future check), value, op_id, source.  Returns
 * struct(reason, op_id, source): the first failing check's reason (null when valid), op_id
 * and source, null where blank.
 */
public final class EventChecks
    implements UDF7<String, Long, Boolean, Long, Double, String, String, Row> {

  private static final long serialVersionUID = 1L;

  private static String given(String text) {
    return OperationChecks.blank(text) ? null : text;
  }

  @Override
  public Row call(
      String key, Long tsMs, Boolean noTs, Long latestTs, Double value, String opId, String source) {
    return RowFactory.create(
        reason(OperationChecks.blank(key), noTs, tsMs, latestTs, value), given(opId), given(source));
  }

  /**
   * The first failing check's reason, in the contract's order (null when valid); shared with
   * {@link EventRows}, which reads the key's blankness from Spark's own string.
   */
  static String reason(boolean keyBlank, Boolean noTs, Long tsMs, Long latestTs, Double value) {
    if (keyBlank) {
      return "missing_key";
    }
    String reason = OperationChecks.timeReason(noTs, tsMs, latestTs);
    if (reason == null && value != null && !Double.isFinite(value)) {
      reason = "bad_value";
    }
    return reason;
  }
}
