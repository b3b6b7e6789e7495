package io.sparkpurgatory.checks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

class EventChecksTest {

  private static final Long LATEST_TS = 1000L;

  private static Row check(String key, Long tsMs, Boolean noTs, Double value, String opId, String source) {
    return new EventChecks().call(key, tsMs, noTs, LATEST_TS, value, opId, source);
  }

  @Test
  void aValidEventHasNoReasonAndItsBlankOpIdAndSourceReadAsAbsent() {
    Row row = check("k", 10L, false, null, "  ", "");
    assertNull(row.get(0));
    assertNull(row.get(1));
    assertNull(row.get(2));
    Row given = check("k", 10L, false, 1.5, " o1", "r1");
    assertNull(given.get(0));
    assertEquals(" o1", given.getString(1)); // kept as given: only a blank one is absent
    assertEquals("r1", given.getString(2));
  }

  @Test
  void theReasonIsTheFirstFailingCheckInTheContractsOrder() {
    assertEquals("missing_key", check(" ", null, true, Double.NaN, null, null).getString(0));
    assertEquals("missing_ts", check("k", null, true, Double.NaN, null, null).getString(0));
    assertEquals("bad_ts", check("k", null, false, Double.NaN, null, null).getString(0));
    assertEquals("ts_in_future", check("k", LATEST_TS + 1, false, Double.NaN, null, null).getString(0));
    assertEquals("bad_value", check("k", LATEST_TS, false, Double.NaN, null, null).getString(0));
    assertNull(check("k", LATEST_TS, false, -2.5, null, null).get(0));
  }

  @Test
  void aValueMustBeFinite() {
    assertEquals("bad_value", check("k", 1L, false, Double.POSITIVE_INFINITY, null, null).getString(0));
    assertEquals("bad_value", check("k", 1L, false, Double.NEGATIVE_INFINITY, null, null).getString(0));
  }
}
