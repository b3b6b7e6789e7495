package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF8;
import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.Seq;

/**
 * An operation's copies and where each goes: what spark_purgatory/spark/routing.py writes as
 * SQL in _route_operations (the list of shard numbers, its posexplode, each copy's role, peer
 * and keys), in one function, for Catalyst one expression node instead of some hundreds.
 *
 * <p>Arguments (SQL, in order): keys (cleaned, sorted), op_id, reason (null when valid), raw,
 * the shard count, the shard key delimiter (null: the whole key), whether operations whose
 * keys span shards are allowed, whether the op_id registry is on.  Returns struct(reason,
 * copies): the reason (cross_shard_keys when such operations are not allowed), and the copies
 * as struct(shard, role, peer, keys): a rejected row once, in the shard of its raw text; an
 * operation in its keys' shard, or in the cross-shard group (number: the shard count) with a
 * stub in each of its keys' shards watching that shard's keys; then a claim for its op_id's
 * registry shard when that is not its home.  Shards are Spark's
 * pmod(xxhash64(shard key), shards): XXH64 with seed 42 over the UTF-8 bytes.
 */
public final class OperationRoutes
    implements UDF8<Seq<String>, String, String, String, Integer, String, Boolean, Boolean, Row> {

  private static final long serialVersionUID = 1L;
  private static final long SEED = 42L;

  static long xxhash64(String text, long seed) {
    return text == null ? seed : XXH64.hashUTF8String(UTF8String.fromString(text), seed);
  }

  static int pmod(long hash, int n) {
    long r = hash % n;
    return (int) (r < 0 ? r + n : r);
  }

  static int shardOf(String key, String delimiter, int shards) {
    String shardKey = key;
    if (delimiter != null && key != null) {
      int at = key.indexOf(delimiter);
      shardKey = at >= 0 ? key.substring(0, at) : key;
    }
    return pmod(xxhash64(shardKey, SEED), shards);
  }

  private static Row copy(int shard, String role, Integer peer, List<String> keys) {
    return RowFactory.create(shard, role, peer, keys);
  }

  @Override
  public Row call(
      Seq<String> keysColumn,
      String opId,
      String reason,
      String raw,
      Integer shardCount,
      String delimiter,
      Boolean crossShardAllowed,
      Boolean registering) {
    List<String> keys = new ArrayList<>();
    if (keysColumn != null) {
      for (int i = 0; i < keysColumn.length(); i++) {
        keys.add(keysColumn.apply(i));
      }
    }
    int shards = shardCount;
    return routes(
        keys, opId, reason, shard -> pmod(xxhash64(raw, SEED), shard), shards, delimiter,
        Boolean.TRUE.equals(crossShardAllowed), Boolean.TRUE.equals(registering));
  }

  /** Where a rejected row goes, given the shard count (its raw text's shard). */
  interface BadShard {
    int of(int shards);
  }

  /**
   * The reason and the copies of an operation with these (cleaned) keys, as {@link #call}
   * returns them; a rejected row's shard from {@code bad}.
   */
  static Row routes(
      List<String> keys,
      String opId,
      String reason,
      BadShard bad,
      int shards,
      String delimiter,
      boolean crossShardAllowed,
      boolean registering) {
    int[] keyShards = new int[keys.size()];
    LinkedHashSet<Integer> distinct = new LinkedHashSet<>();
    for (int i = 0; i < keyShards.length; i++) {
      keyShards[i] = shardOf(keys.get(i), delimiter, shards);
      distinct.add(keyShards[i]);
    }
    boolean crossing = distinct.size() > 1;
    if (reason == null && crossing && !crossShardAllowed) {
      reason = "cross_shard_keys";
    }
    List<Row> copies = new ArrayList<>();
    if (reason != null) {
      copies.add(copy(bad.of(shards), "bad", null, keys));
      return RowFactory.create(reason, copies);
    }
    int home = crossing ? shards : distinct.iterator().next();
    int registry = -1;
    if (registering && !crossing) {
      registry = pmod(xxhash64("registry", xxhash64(opId, SEED)), shards);
    }
    copies.add(copy(home, "op", registry, keys));
    if (crossing) {
      for (int shard : distinct) {
        List<String> own = new ArrayList<>();
        for (int i = 0; i < keyShards.length; i++) {
          if (keyShards[i] == shard) {
            own.add(keys.get(i));
          }
        }
        copies.add(copy(shard, "stub", null, own));
      }
    }
    if (registry >= 0 && registry != home) {
      copies.add(copy(registry, "claim", home, keys));
    }
    return RowFactory.create(reason, copies);
  }
}
