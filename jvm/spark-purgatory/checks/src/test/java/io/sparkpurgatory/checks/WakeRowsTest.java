package io.sparkpurgatory.checks;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

class WakeRowsTest {

  /** The rows of {@code line} with 2 shards as "shard role clock" lines. */
  private static List<String> rows(String line, boolean registering) {
    ArrayData rows =
        WakeRows.rows(
            line == null, OperationChecks.utf8(line), false, OperationChecks.utf8("end"), false,
            OperationChecks.utf8("clock"), false, 2, false, registering);
    List<String> out = new ArrayList<>();
    for (int i = 0; i < rows.numElements(); i++) {
      InternalRow row = rows.getStruct(i, 3);
      Object clock = row.isNullAt(2) ? null : row.getLong(2);
      out.add(row.getInt(0) + " " + Rows.ROLES[row.getByte(1)] + " " + clock);
    }
    return out;
  }

  @Test
  void aWakeLineCallsTheCrossShardGroupOrEveryGroupWithTheRegistry() {
    assertEquals(List.of("2 wake null"), rows("relay 7", false));
    assertEquals(List.of("2 wake null"), rows(null, false));
    assertEquals(List.of("0 wake null", "1 wake null", "2 wake null"), rows("relay 7", true));
  }

  @Test
  void theEndMarkAndTheClockGoToEveryGroup() {
    assertEquals(List.of("0 end null", "1 end null", "2 end null"), rows("  end ", false));
    assertEquals(List.of("0 clock 42", "1 clock 42", "2 clock 42"), rows(" clock 42", false));
    assertEquals(List.of("0 clock null", "1 clock null", "2 clock null"), rows("clock x", false));
  }

  @Test
  void aLineThatOnlyLooksLikeOneIsAWake() {
    assertEquals(List.of("2 wake null"), rows("ending", false));
    assertEquals(List.of("2 wake null"), rows("clock", false));
    assertEquals(List.of("2 wake null"), rows("clocks 1", false));
  }
}
