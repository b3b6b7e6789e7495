package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;


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
 *
 * <p>A static method that Spark calls from its generated code on its own values ({@link
 * StaticCalls}), as {@link OperationRows}, which routes with {@link #routes} too.
 */
public final class OperationRoutes {

  private OperationRoutes() {}

  private static final long SEED = 42L;
  private static final UTF8String REGISTRY = UTF8String.fromString("registry");
  /**
   * A copy's role as the routed rows carry it: its name's place in spark_purgatory/shard/
   * roles.py's ROLES (op, stub, event, replica, bad, claim, ...), a number where a name would
   * cost the plan a CASE over every role.  ROLES is the declaration: tests/spark/
   * test_checks_jar.py requires each number here to be its name's place there.
   */
  static final byte OP = 0;
  static final byte STUB = 1;
  static final byte EVENT = 2;
  static final byte BAD = 4;
  static final byte CLAIM = 5;
  static final byte WAKE = 6;
  static final byte END = 7;
  static final byte CLOCK = 8;

  static long xxhash64(UTF8String text, long seed) {
    return text == null ? seed : XXH64.hashUTF8String(text, seed);
  }

  static int pmod(long hash, int n) {
    long r = hash % n;
    return (int) (r < 0 ? r + n : r);
  }

  /** The shard of {@code key}: of its part before the first {@code delimiter} (SQL's substring_index). */
  static int shardOf(UTF8String key, UTF8String delimiter, int shards) {
    UTF8String shardKey = delimiter != null && key != null ? key.subStringIndex(delimiter, 1) : key;
    return pmod(xxhash64(shardKey, SEED), shards);
  }

  private static InternalRow copy(int shard, byte role, Integer peer, List<UTF8String> keys) {
    return new GenericInternalRow(new Object[] {shard, Byte.valueOf(role), peer, array(keys)});
  }

  /** Spark's strings as its array of strings; null stays null. */
  static ArrayData array(List<UTF8String> items) {
    return items == null ? null : new GenericArrayData(items.toArray());
  }

  /**
   * The call, as Spark makes it ({@link StaticCalls}: each argument as (is null, value));
   * returns struct(reason, copies), each copy (shard, role's number, peer, keys).
   */
  public static InternalRow route(
      boolean keysNull,
      ArrayData keysColumn,
      boolean opIdNull,
      UTF8String opIdGiven,
      boolean reasonNull,
      UTF8String reason,
      boolean rawNull,
      UTF8String rawGiven,
      boolean shardCountNull,
      int shardCount,
      boolean delimiterNull,
      UTF8String delimiterGiven,
      boolean crossShardAllowedNull,
      boolean crossShardAllowed,
      boolean registeringNull,
      boolean registering) {
    List<UTF8String> keys = keysNull ? new ArrayList<>() : OperationRows.list(keysColumn);
    UTF8String opId = opIdNull ? null : opIdGiven;
    UTF8String raw = rawNull ? null : rawGiven;
    UTF8String delimiter = delimiterNull ? null : delimiterGiven;
    Routed routed =
        routes(
            keys, opId, reasonNull ? null : reason.toString(),
            shard -> pmod(xxhash64(raw, SEED), shard), shardCount, delimiter,
            !crossShardAllowedNull && crossShardAllowed, !registeringNull && registering);
    return routed.row();
  }

  /** Where a rejected row goes, given the shard count (its raw text's shard). */
  interface BadShard {
    int of(int shards);
  }

  /** An operation's reason and its copies, each (shard, role's number, peer, keys) as Spark's row. */
  static final class Routed {
    final String reason;
    final List<InternalRow> copies;

    Routed(String reason, List<InternalRow> copies) {
      this.reason = reason;
      this.copies = copies;
    }

    /** The reason as Spark's string (null when none). */
    UTF8String why() {
      return reason == null ? null : UTF8String.fromString(reason);
    }

    /** The copies as Spark's array. */
    ArrayData copiesArray() {
      return new GenericArrayData(copies.toArray());
    }

    /** As Spark's struct(reason, copies). */
    InternalRow row() {
      return new GenericInternalRow(new Object[] {why(), copiesArray()});
    }
  }

  /**
   * The reason and the copies of an operation with these (cleaned) keys, as {@link #call}
   * returns them; a rejected row's shard from {@code bad}.
   */
  static Routed routes(
      List<UTF8String> keys,
      UTF8String opId,
      String reason,
      BadShard bad,
      int shards,
      UTF8String delimiter,
      boolean crossShardAllowed,
      boolean registering) {
    int[] keyShards = new int[keys.size()];
    int[] distinct = new int[keyShards.length]; // the shards in the order of their first key
    int shardsSeen = 0;
    for (int i = 0; i < keyShards.length; i++) {
      int shard = shardOf(keys.get(i), delimiter, shards);
      keyShards[i] = shard;
      int seen = 0;
      while (seen < shardsSeen && distinct[seen] != shard) {
        seen++;
      }
      if (seen == shardsSeen) {
        distinct[shardsSeen++] = shard;
      }
    }
    boolean crossing = shardsSeen > 1;
    if (reason == null && crossing && !crossShardAllowed) {
      reason = "cross_shard_keys";
    }
    List<InternalRow> copies = new ArrayList<>(2);
    if (reason != null) {
      copies.add(copy(bad.of(shards), BAD, null, keys));
      return new Routed(reason, copies);
    }
    int home = crossing ? shards : keyShards[0];
    int registry = -1;
    if (registering && !crossing) {
      registry = pmod(xxhash64(REGISTRY, xxhash64(opId, SEED)), shards);
    }
    copies.add(copy(home, OP, registry, keys));
    if (crossing) {
      for (int d = 0; d < shardsSeen; d++) {
        int shard = distinct[d];
        List<UTF8String> own = new ArrayList<>();
        for (int i = 0; i < keyShards.length; i++) {
          if (keyShards[i] == shard) {
            own.add(keys.get(i));
          }
        }
        copies.add(copy(shard, STUB, null, own));
      }
    }
    if (registry >= 0 && registry != home) {
      copies.add(copy(registry, CLAIM, home, keys));
    }
    return new Routed(reason, copies);
  }
}
