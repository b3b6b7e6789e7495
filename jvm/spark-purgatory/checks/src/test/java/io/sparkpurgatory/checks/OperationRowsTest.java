package io.sparkpurgatory.checks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/** Shards as in OperationRoutesTest: with 4 shards "a" is in 0, "b" in 3; "o2"'s registry is 1. */
class OperationRowsTest {

  private static final String NAMES = Rows.CHECKS;

  /** The call as Spark makes it: internal values, each primitive as (is null, value). */
  private static InternalRow rows(ArrayData keys, String opId, Long timeoutMs, boolean crossShard) {
    return OperationRows.rows(
        opId == null, utf8(opId), keys == null, keys, true, null, false, 500L, false, 2000L, true,
        0L, timeoutMs == null, timeoutMs == null ? 0L : timeoutMs, false, timeoutMs == null, false,
        1000L, false, utf8(" COUNT "), false, 3.0, true, null, true, 0L, false, true, false, utf8(NAMES), false, 4, true,
        null, false, crossShard, false, true);
  }

  private static List<String> copies(InternalRow rows) {
    InternalRow routed = new GenericInternalRow(new Object[] {rows.getUTF8String(0), rows.getArray(3)});
    return Rows.copies(Rows.routed(routed), 1);
  }

  private static UTF8String utf8(String text) {
    return OperationChecks.utf8(text);
  }

  private static ArrayData seq(String... items) {
    List<UTF8String> out = new ArrayList<>();
    for (String item : items) {
      out.add(utf8(item));
    }
    return OperationRoutes.array(out);
  }

  @Test
  void aValidOperationIsCheckedCleanedAndRoutedInOneCall() {
    InternalRow rows = rows(seq("a", " ", "a"), "o2", 100L, false);
    assertTrue(rows.isNullAt(0));
    assertEquals("count", rows.getUTF8String(1).toString());
    assertEquals(List.of("0 op 1 [a]", "1 claim 0 [a]"), copies(rows));
  }

  @Test
  void aRejectedRowIsOneCopyWhoseShardTheCallerGives() {
    InternalRow rows = rows(seq("a"), "o2", null, false);
    assertEquals("missing_timeout_ms", rows.getUTF8String(0).toString());
    assertEquals(List.of("-1 bad null [a]"), copies(rows));
  }

  @Test
  void keysAcrossShardsAreRejectedByTheRoutesWhenNotAllowed() {
    assertEquals("cross_shard_keys", rows(seq("a", "b"), "o2", 100L, false).getUTF8String(0).toString());
    assertEquals(
        List.of("4 op -1 [a, b]", "0 stub null [a]", "3 stub null [b]"),
        copies(rows(seq("a", "b"), "o2", 100L, true)));
  }

  /** A valid operation but for these: the event time's null flag, the latest accepted, the target's flag. */
  private static String reason(boolean tsMsNull, long latestTs, String condition, boolean targetNull) {
    InternalRow rows =
        OperationRows.rows(
            false, utf8("o2"), false, seq("a"), true, null, tsMsNull, 500L, false, 2000L, false,
            latestTs, false, 100L, false, false, false, 1000L, false, utf8(condition), targetNull,
            3.0, true, null, true, 0L, false, true, false, utf8(NAMES), false, 4, true, null, false, false, false, true);
    return rows.isNullAt(0) ? null : rows.getUTF8String(0).toString();
  }

  @Test
  void theEventTimeIsCheckedForItsRangeAndComesBackWhereInIt() {
    InternalRow inRange = rows(seq("a"), "o2", 100L, false);
    assertEquals(500L, inRange.getLong(4));
    InternalRow past =
        OperationRows.rows(
            false, utf8("o2"), false, seq("a"), true, null, false, 2000L, false, 2000L, true, 0L,
            false, 100L, false, false, false, 1000L, false, utf8("any"), true, 0.0, true, null, true, 0L, false, true,
            false, utf8(NAMES), false, 4, true, null, false, false, false, true);
    assertEquals("bad_ts", past.getUTF8String(0).toString());
    assertTrue(past.isNullAt(4));
  }

  @Test
  void aNullFlagMakesItsValueNullWhateverTheValue() {
    // Spark passes a null as (true, whatever value); a flag set reads as null, not as the value
    assertNull(reason(false, 600L, "count", false));
    assertEquals("missing_ts", reason(true, 600L, "count", false));
    assertEquals("missing_target", reason(false, 600L, "count", true));
    assertEquals("ts_in_future", reason(false, 400L, "count", false));
  }
}
