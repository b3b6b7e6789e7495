package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A typed operation checked and routed in one call: {@link OperationChecks} then {@link
 * OperationRoutes}, for Catalyst one expression node that Spark calls from its generated code
 * on its own values ({@link StaticCalls}: no conversion of the arguments to Java objects, nor of
 * the result back).
 *
 * <p>Arguments (SQL, in order): those of {@link OperationChecks}, but for the event time: the
 * time in epoch ms as read from the column (null: none; its range not yet checked) and the
 * range's end (contract.MAX_TS_MS) where the checks take it checked and whether it is absent;
 * then those of {@link OperationRoutes} after its raw text (the shard count, the shard key
 * delimiter, whether operations whose keys span shards are allowed, whether the op_id
 * registry is on); each arrives as (is null, value), as {@link StaticCalls} passes it.
 * Returns struct(reason, condition, members, copies, ts_ms): the checks' reason (or the
 * routes' cross_shard_keys), condition and members, the routes' copies, with -1 for the shard
 * of a rejected row: its raw text is rendered after the call, only for rejected rows, and the
 * caller hashes it (spark_purgatory/spark/routing.py), and the event time where in range.
 */
public final class OperationRows {

  private OperationRows() {}

  private static final OperationRoutes.BadShard UNKNOWN = shards -> -1;

  /** The call, as Spark makes it (see the class comment for the arguments). */
  public static InternalRow rows(
      boolean opIdNull,
      UTF8String opIdGiven,
      boolean keysNull,
      ArrayData keysGiven,
      boolean keyNull,
      UTF8String keyGiven,
      boolean tsReadNull,
      long tsRead,
      boolean tsEndNull,
      long tsEnd,
      boolean latestTsNull,
      long latestTs,
      boolean timeoutMsNull,
      long timeoutMs,
      boolean noTimeoutNull,
      boolean noTimeout,
      boolean maxTimeoutMsNull,
      long maxTimeoutMs,
      boolean conditionNull,
      UTF8String conditionGiven,
      boolean targetNull,
      double target,
      boolean membersNull,
      ArrayData membersGiven,
      boolean warnMsNull,
      long warnMs,
      boolean noWarnMsNull,
      boolean noWarnMs,
      boolean checksNull,
      UTF8String checks,
      boolean shardCountNull,
      int shardCount,
      boolean delimiterNull,
      UTF8String delimiterGiven,
      boolean crossShardAllowedNull,
      boolean crossShardAllowed,
      boolean registeringNull,
      boolean registering) {
    UTF8String opId = opIdNull ? null : opIdGiven;
    ArrayData keysColumn = keysNull ? null : keysGiven;
    UTF8String key = keyNull ? null : keyGiven;
    UTF8String condition = conditionNull ? null : conditionGiven;
    ArrayData membersColumn = membersNull ? null : membersGiven;
    UTF8String delimiter = delimiterNull ? null : delimiterGiven;
    Long tsMs = OperationChecks.inRange(tsReadNull, tsRead, tsEndNull, tsEnd);
    OperationChecks.Checked checked =
        OperationChecks.check(
            opId, list(keysColumn), key, tsMs, tsReadNull,
            latestTsNull ? null : latestTs, timeoutMsNull ? null : timeoutMs,
            !noTimeoutNull && noTimeout, condition, targetNull ? null : target,
            list(membersColumn), warnMsNull ? null : warnMs, !noWarnMsNull && noWarnMs,
            OperationChecks.rules(checks));
    OperationRoutes.Routed routed =
        OperationRoutes.routes(
            checked.keys == null ? new ArrayList<>() : checked.keys, opId, checked.reason, UNKNOWN,
            shardCount, delimiter, !crossShardAllowedNull && crossShardAllowed,
            !registeringNull && registering);
    return new GenericInternalRow(
        new Object[] {
          routed.why(), checked.condition, OperationRoutes.array(checked.members),
          routed.copiesArray(), tsMs
        });
  }

  /** An array of strings as a list (null items kept); null stays null. */
  static List<UTF8String> list(ArrayData items) {
    if (items == null) {
      return null;
    }
    int n = items.numElements();
    List<UTF8String> out = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      out.add(items.isNullAt(i) ? null : items.getUTF8String(i));
    }
    return out;
  }
}
