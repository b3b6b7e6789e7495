package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;

/**
 * One Spark partition's marks ({@link BatchMarks}): each input's largest event time over the
 * partition's rows, and at its end a mark of it for every shard group.  Rows rejected at parse and
 * rows of a side that is no input (the wake's) carry no event time of an input.
 */
final class PartitionMarks {

  private final int[] labels;
  private final byte markRole;
  private final byte badRole;
  private final int shard;
  private final int role;
  private final int side;
  private final int ts;
  private final Object[] blank;
  private final long[] largest;
  private final boolean[] seen;

  /**
   * {@code labels}: the shard groups' labels; {@code inputs}: sides 0 to inputs - 1 are inputs;
   * {@code shard}, {@code role}, {@code side}, {@code ts}: the columns' places in a row;
   * {@code blank}: a mark's values before it is set (null, or a zero where a column is never null).
   */
  PartitionMarks(
      int[] labels, byte markRole, byte badRole, int inputs, int shard, int role, int side, int ts,
      Object[] blank) {
    this.labels = labels;
    this.markRole = markRole;
    this.badRole = badRole;
    this.shard = shard;
    this.role = role;
    this.side = side;
    this.ts = ts;
    this.blank = blank;
    this.largest = new long[inputs];
    this.seen = new boolean[inputs];
  }

  /** Counts {@code row}'s event time for its input. */
  void note(InternalRow row) {
    if (row.isNullAt(side) || row.isNullAt(role) || row.isNullAt(ts)) {
      return;
    }
    int input = row.getByte(side);
    if (input < 0 || input >= seen.length || row.getByte(role) == badRole) {
      return;
    }
    long time = row.getLong(ts);
    if (!seen[input] || time > largest[input]) {
      largest[input] = time;
      seen[input] = true;
    }
  }

  /** The marks: for each input with a row in the partition, one for every shard group. */
  List<InternalRow> marks() {
    List<InternalRow> out = new ArrayList<>();
    for (int input = 0; input < seen.length; input++) {
      if (seen[input]) {
        for (int label : labels) {
          Object[] values = blank.clone();
          values[shard] = label;
          values[role] = markRole;
          values[side] = (byte) input;
          values[ts] = largest[input];
          out.add(new GenericInternalRow(values));
        }
      }
    }
    return out;
  }
}
