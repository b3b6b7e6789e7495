package io.sparkpurgatory.checks;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.junit.jupiter.api.Test;

/** A partition's marks ({@link PartitionMarks}, what {@link BatchMarks} emits at its end). */
class BatchMarksTest {

  private static final byte MARK = 9;
  private static final byte BAD = 4;

  /** Rows of (shard, role, side, target, ts_ms); shard groups 10, 11, 12; two inputs. */
  private static PartitionMarks partition() {
    Object[] blank = {0, null, null, null, null};
    return new PartitionMarks(new int[] {10, 11, 12}, MARK, BAD, 2, 0, 1, 2, 4, blank);
  }

  private static InternalRow row(int shard, int role, int side, double target, Long ts) {
    return new GenericInternalRow(new Object[] {shard, (byte) role, (byte) side, target, ts});
  }

  private static List<String> lines(List<InternalRow> rows) {
    List<String> out = new ArrayList<>();
    for (InternalRow r : rows) {
      out.add(
          r.getInt(0) + " " + r.getByte(1) + " " + r.getByte(2) + " "
              + (r.isNullAt(3) ? "null" : r.getDouble(3)) + " " + r.getLong(4));
    }
    return out;
  }

  @Test
  void thePartitionEndsWithEachInputsLargestTimeForEveryGroup() {
    PartitionMarks marks = partition();
    marks.note(row(10, 0, 0, 1.0, 5_000L));
    marks.note(row(11, 2, 1, 2.0, 7_000L));
    marks.note(row(10, 0, 0, 3.0, 9_000L));
    marks.note(row(11, 2, 1, 4.0, 6_000L));
    marks.note(row(12, BAD, 1, 5.0, 99_000L)); // rejected at parse: no time of its input
    marks.note(row(12, 6, 2, 6.0, 50_000L)); // the wake's side: not an input
    assertEquals(
        List.of(
            "10 9 0 null 9000", "11 9 0 null 9000", "12 9 0 null 9000",
            "10 9 1 null 7000", "11 9 1 null 7000", "12 9 1 null 7000"),
        lines(marks.marks()));
  }

  @Test
  void aPartitionWithoutAnInputsTimedRowsMarksNothingForIt() {
    PartitionMarks marks = partition();
    assertEquals(List.of(), lines(marks.marks()));
    marks.note(row(11, 2, 1, 2.0, -7_000L)); // before the epoch: still the largest
    marks.note(row(11, 2, 1, 3.0, null));
    assertEquals(
        List.of("10 9 1 null -7000", "11 9 1 null -7000", "12 9 1 null -7000"),
        lines(marks.marks()));
  }
}
