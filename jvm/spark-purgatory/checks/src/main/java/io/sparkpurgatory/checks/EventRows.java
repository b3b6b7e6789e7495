package io.sparkpurgatory.checks;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A typed completion event checked and routed in one call: {@link EventChecks}'s reason, its
 * op_id and source read as absent where blank, and the shard of its key ({@link
 * OperationRoutes#shardOf}: Spark's pmod(xxhash64(shard key), shards), the shard the SQL in
 * spark_purgatory/spark/routing.py gives), for Catalyst one expression node that Spark calls
 * from its generated code on its own values ({@link StaticCalls}), as {@link OperationRows}
 * does for operations.
 *
 * <p>Arguments (SQL, in order): key, the event time in epoch ms as read from the column (null:
 * none; not yet checked for its range), the end of that range (contract.MAX_TS_MS: from 0 up to
 * it, else bad_ts), the latest event time accepted (null: no ts_in_future check), value,
 * op_id, source, the shard count, the shard key delimiter (null: the whole key); each arrives
 * as (is null, value).  Returns struct(reason, op_id, source, ts_ms, shard, role): the reason
 * (null when valid), op_id and source (null where blank), the event time (null when out of
 * range), the key's shard, and the role as its place in shard/roles.py's ROLES (event, or bad
 * for a rejected row, whose shard is -1: its raw text is rendered after the call, only for
 * rejected rows, and the caller hashes it).
 */
public final class EventRows {

  private EventRows() {}

  /** The call, as Spark makes it (see the class comment for the arguments). */
  public static InternalRow rows(
      boolean keyNull,
      UTF8String keyGiven,
      boolean tsReadNull,
      long tsRead,
      boolean tsEndNull,
      long tsEnd,
      boolean latestTsNull,
      long latestTs,
      boolean valueNull,
      double value,
      boolean opIdNull,
      UTF8String opId,
      boolean sourceNull,
      UTF8String source,
      boolean shardCountNull,
      int shardCount,
      boolean delimiterNull,
      UTF8String delimiter) {
    UTF8String key = keyNull ? null : keyGiven;
    Long tsMs = OperationChecks.inRange(tsReadNull, tsRead, tsEndNull, tsEnd);
    String reason =
        EventChecks.reason(
            OperationChecks.blank(key), tsReadNull, tsMs, latestTsNull ? null : latestTs,
            valueNull ? null : value);
    int shard = -1;
    byte role = OperationRoutes.BAD;
    if (reason == null) {
      shard = OperationRoutes.shardOf(key, delimiterNull ? null : delimiter, shardCount);
      role = OperationRoutes.EVENT;
    }
    return new GenericInternalRow(
        new Object[] {
          reason == null ? null : UTF8String.fromString(reason), given(opIdNull ? null : opId),
          given(sourceNull ? null : source), tsMs, shard, role
        });
  }

  /** Spark's string, null where blank. */
  private static UTF8String given(UTF8String text) {
    return OperationChecks.blank(text) ? null : text;
  }
}
