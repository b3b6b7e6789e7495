package io.sparkpurgatory.checks;

import static io.sparkpurgatory.checks.Rows.seq;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

import scala.collection.Seq;

/**
 * The shards below are Spark's pmod(xxhash64(key), n), as spark_purgatory/spark/key_hash.py
 * computes them: with 4 shards "a" is in 0, "b" in 3, "order-1" in 3; with 3 shards "a" is in
 * 0, "c" in 2 and the raw text "raw text" in 1; the op_id registry of "o2" is shard 1 of 4, that of "o1" shard 0.
 */
class OperationRoutesTest {

  /** The call as Spark makes it (internal values, each as (is null, value)), read back. */
  private static Row route(
      Seq<String> keys, String opId, String reason, String raw, int shards, String delimiter,
      boolean crossShard, boolean registering) {
    return Rows.routed(
        OperationRoutes.route(
            keys == null, Rows.internal(keys), opId == null, OperationChecks.utf8(opId),
            reason == null, OperationChecks.utf8(reason), raw == null, OperationChecks.utf8(raw),
            false, shards, delimiter == null, OperationChecks.utf8(delimiter), false, crossShard,
            false, registering));
  }

  /** The copies as "shard role peer [keys]" lines, easy to compare and to read in a failure. */
  private static List<String> copies(Row routed) {
    return Rows.copies(routed, 1);
  }

  private static long xxhash64(String text) {
    return OperationRoutes.xxhash64(OperationChecks.utf8(text), 42L);
  }

  private static int shardOf(String key, String delimiter, int shards) {
    return OperationRoutes.shardOf(OperationChecks.utf8(key), OperationChecks.utf8(delimiter), shards);
  }

  @Test
  void xxhash64IsSparksWithItsSeed() {
    assertEquals(-8582455328737087284L, xxhash64("a"));
    assertEquals(2065146811275570100L, xxhash64("\u00E9")); // UTF-8 bytes
    assertEquals(42L, xxhash64(null)); // Spark: a null hashes to the seed
  }

  @Test
  void pmodIsNeverNegative() {
    assertEquals(2, OperationRoutes.pmod(-2L, 4));
    assertEquals(0, OperationRoutes.pmod(-8582455328737087284L, 4));
    assertEquals(3, OperationRoutes.pmod(Long.MIN_VALUE + 3, 4)); // MIN_VALUE is 0 mod 4
  }

  @Test
  void anOperationGoesToItsKeysShard() {
    Row routed = route(seq("a"), "o1", null, "{}", 4, null, false, false);
    assertNull(routed.get(0));
    assertEquals(List.of("0 op -1 [a]"), copies(routed));
  }

  @Test
  void aClaimGoesToTheRegistryShardWhenThatIsNotTheHome() {
    assertEquals(
        List.of("0 op 1 [a]", "1 claim 0 [a]"),
        copies(route(seq("a"), "o2", null, "{}", 4, null, false, true)));
    assertEquals(List.of("0 op 0 [a]"), copies(route(seq("a"), "o1", null, "{}", 4, null, false, true)));
  }

  @Test
  void keysAcrossShardsGoToTheCrossShardGroupWithAStubInEachShard() {
    Row routed = route(seq("a", "b"), "o2", null, "{}", 4, null, true, true);
    assertNull(routed.get(0));
    // group number = shard count; no registry for cross-shard operations (peer -1)
    assertEquals(List.of("4 op -1 [a, b]", "0 stub null [a]", "3 stub null [b]"), copies(routed));
  }

  @Test
  void keysAcrossShardsAreRejectedWhenNotAllowedInTheRawTextsShard() {
    Row routed = route(seq("a", "c"), "o1", null, "raw text", 3, null, false, false);
    assertEquals("cross_shard_keys", routed.getString(0));
    assertEquals(List.of("1 bad null [a, c]"), copies(routed));
  }

  @Test
  void aRejectedRowGoesOnceToItsRawTextsShardKeepingItsReason() {
    Row routed = route(seq(), null, "missing_op_id", null, 4, null, true, true);
    assertEquals("missing_op_id", routed.getString(0));
    assertEquals(List.of("2 bad null []"), copies(routed)); // pmod(42, 4): a null raw hashes to the seed
  }

  @Test
  void theShardKeyIsTheKeyUpToTheDelimiter() {
    Seq<String> keys = seq("order-1:x", "order-1:y"); // without a delimiter: shards 3 and 0
    assertEquals(2, copies(route(keys, "o1", null, "{}", 4, null, true, false)).size() - 1);
    assertEquals(
        List.of("3 op -1 [order-1:x, order-1:y]"), copies(route(keys, "o1", null, "{}", 4, ":", true, false)));
    assertEquals(
        Arrays.asList(3, 3),
        Arrays.asList(shardOf("order-1", ":", 4), shardOf("order-1:z", ":", 4)));
  }

  @Test
  void aValueBesideANullFlagIsNotRead() {
    // generated code may hand over a null string as an earlier row's value, beside its flag
    Row routed =
        Rows.routed(
            OperationRoutes.route(
                false, Rows.internal(seq("a")), false, OperationChecks.utf8("o2"), true,
                OperationChecks.utf8("missing_ts"), false, OperationChecks.utf8("{}"), false, 4,
                true, OperationChecks.utf8(":"), false, false, false, true));
    assertNull(routed.get(0));
    assertEquals(List.of("0 op 1 [a]", "1 claim 0 [a]"), copies(routed));
  }
}
