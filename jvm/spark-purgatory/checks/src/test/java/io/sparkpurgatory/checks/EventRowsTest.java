package io.sparkpurgatory.checks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/** Shards as in OperationRoutesTest: with 4 shards "a" is in 0, "b" in 3. */
class EventRowsTest {

  /** The call as Spark makes it: times up to 2000, the latest accepted 1000, 4 shards. */
  private static InternalRow rows(String key, Long tsMs, Double value, String opId) {
    return rows(key, tsMs, value, opId, null);
  }

  private static InternalRow rows(
      String key, Long tsMs, Double value, String opId, String delimiter) {
    return EventRows.rows(
        key == null, utf8(key), tsMs == null, tsMs == null ? 0L : tsMs, false, 2000L, false, 1000L,
        value == null, value == null ? 0.0 : value, opId == null, utf8(opId), false, utf8("  "),
        false, 4, delimiter == null, utf8(delimiter));
  }

  private static UTF8String utf8(String text) {
    return OperationChecks.utf8(text);
  }

  private static String reason(InternalRow row) {
    return row.isNullAt(0) ? null : row.getUTF8String(0).toString();
  }

  private static String route(InternalRow row) {
    return row.getInt(4) + " " + Rows.ROLES[row.getByte(5)];
  }

  @Test
  void aValidEventGoesToItsKeysShardWithBlankFieldsAbsent() {
    InternalRow row = rows("b", 500L, 1.5, " ");
    assertNull(reason(row));
    assertNull(row.getUTF8String(1)); // op_id blank
    assertNull(row.getUTF8String(2)); // source blank
    assertEquals("3 event", route(row));
    assertEquals("o1", rows("a", 500L, null, "o1").getUTF8String(1).toString());
    assertEquals("0 event", route(rows("a", 500L, null, "o1")));
  }

  @Test
  void theShardKeyIsTheKeysPartBeforeTheDelimiter() {
    assertEquals("3 event", route(rows("b:x", 500L, 1.0, null, ":")));
    assertEquals("0 event", route(rows("a:y", 500L, 1.0, null, ":")));
  }

  @Test
  void theReasonsComeInTheContractsOrderAndARejectedRowsShardIsTheCallers() {
    assertEquals("missing_key", reason(rows(" ", null, Double.NaN, null)));
    assertEquals("-1 bad", route(rows(" ", null, Double.NaN, null)));
    assertEquals("missing_ts", reason(rows("a", null, Double.NaN, null)));
    assertEquals("bad_ts", reason(rows("a", -1L, Double.NaN, null)));
    assertEquals("bad_ts", reason(rows("a", 2000L, Double.NaN, null)));
    assertEquals("ts_in_future", reason(rows("a", 1001L, Double.NaN, null)));
    assertEquals("bad_value", reason(rows("a", 500L, Double.POSITIVE_INFINITY, null)));
  }

  @Test
  void theEventTimeComesBackWhereInRangeWhateverTheReason() {
    assertEquals(500L, rows(" ", 500L, null, null).getLong(3));
    assertTrue(rows("a", 2000L, null, null).isNullAt(3));
    assertTrue(rows("a", null, null, null).isNullAt(3));
  }

  @Test
  void aNullFlagMakesItsValueNullWhateverTheValue() {
    // no range end and no latest accepted given: (null, 0) is no limit, not a limit of 0
    InternalRow row =
        EventRows.rows(
            false, utf8("a"), false, 500L, true, 0L, true, 0L, true, Double.NaN, true,
            utf8("kept from an earlier row"), true, utf8("x"), false, 4, true, utf8(":"));
    assertNull(reason(row));
    assertNull(row.getUTF8String(1));
    assertEquals("0 event", route(row));
  }
}
