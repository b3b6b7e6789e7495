package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A line of the wake files as the rows it makes, in one call: what
 * spark_purgatory/spark/routing.py's route_wake writes as SQL (the line trimmed of spaces,
 * compared with the end mark and the clock line's first word, the list of shards, the role,
 * the clock's watermark), for Catalyst one expression node ({@link StaticCalls}).
 *
 * <p>Arguments (SQL, in order): the line, the end mark, the clock line's first word, the shard
 * count, whether the op_id registry is on; each arrives as (is null, value).  Returns an
 * array of struct(shard, role, clock): the end mark one row of role end for every shard group
 * (0 to the shard count, the cross-shard group's number); a clock line ("clock" and a space,
 * then the watermark) one row of role clock for every group, with its watermark (null where it
 * is not a whole number); any other line one row of role wake for the cross-shard group, or
 * for every group with the registry on.
 */
public final class WakeRows {

  private WakeRows() {}

  private static final UTF8String SPACE = UTF8String.fromString(" ");

  /** The call, as Spark makes it (see the class comment for the arguments). */
  public static ArrayData rows(
      boolean lineNull,
      UTF8String lineGiven,
      boolean endNull,
      UTF8String end,
      boolean clockNull,
      UTF8String clock,
      boolean shardCountNull,
      int shards,
      boolean registeringNull,
      boolean registering) {
    UTF8String line = lineNull ? null : lineGiven.trim();
    UTF8String clockWord = clockNull ? null : UTF8String.concat(clock, SPACE);
    byte role = OperationRoutes.WAKE;
    Long watermark = null;
    if (line != null && !endNull && line.equals(end)) {
      role = OperationRoutes.END;
    } else if (line != null && clockWord != null && line.startsWith(clockWord)) {
      role = OperationRoutes.CLOCK;
      watermark = whole(line.substring(clockWord.numChars(), line.numChars()));
    }
    boolean everyGroup = role != OperationRoutes.WAKE || (!registeringNull && registering);
    List<Object> rows = new ArrayList<>(everyGroup ? shards + 1 : 1);
    for (int shard = everyGroup ? 0 : shards; shard <= shards; shard++) {
      rows.add(new GenericInternalRow(new Object[] {shard, role, watermark}));
    }
    return new GenericArrayData(rows.toArray());
  }

  /** A whole number as Spark casts text to bigint (spaces around it allowed); null if none. */
  static Long whole(UTF8String text) {
    UTF8String.LongWrapper out = new UTF8String.LongWrapper();
    return text.trimAll().toLong(out) ? out.value : null;
  }
}
