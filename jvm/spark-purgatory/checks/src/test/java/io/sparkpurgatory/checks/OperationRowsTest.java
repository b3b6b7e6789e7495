package io.sparkpurgatory.checks;

import static io.sparkpurgatory.checks.Rows.seq;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.List;

import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

import scala.collection.Seq;

/** Shards as in OperationRoutesTest: with 4 shards "a" is in 0, "b" in 3; "o2"'s registry is 1. */
class OperationRowsTest {

  private static final String NAMES = "any count sum all offset|count sum offset|all|1000|1000";

  private static Row rows(Seq<String> keys, String opId, Long timeoutMs, boolean crossShard) {
    return new OperationRows()
        .call(opId, keys, null, 500L, false, null, timeoutMs, timeoutMs == null, 1000L, " COUNT ",
            3.0, null, NAMES, 4, null, crossShard, true);
  }

  private static List<String> copies(Row rows) {
    return Rows.copies(rows, 3);
  }

  @Test
  void aValidOperationIsCheckedCleanedAndRoutedInOneCall() {
    Row rows = rows(seq("a", " ", "a"), "o2", 100L, false);
    assertNull(rows.get(0));
    assertEquals("count", rows.getString(1));
    assertEquals(List.of("0 op 1 [a]", "1 claim 0 [a]"), copies(rows));
  }

  @Test
  void aRejectedRowIsOneCopyWhoseShardTheCallerGives() {
    Row rows = rows(seq("a"), "o2", null, false);
    assertEquals("missing_timeout_ms", rows.getString(0));
    assertEquals(List.of("-1 bad null [a]"), copies(rows));
  }

  @Test
  void keysAcrossShardsAreRejectedByTheRoutesWhenNotAllowed() {
    assertEquals("cross_shard_keys", rows(seq("a", "b"), "o2", 100L, false).getString(0));
    assertEquals(
        List.of("4 op -1 [a, b]", "0 stub null [a]", "3 stub null [b]"),
        copies(rows(seq("a", "b"), "o2", 100L, true)));
  }
}
