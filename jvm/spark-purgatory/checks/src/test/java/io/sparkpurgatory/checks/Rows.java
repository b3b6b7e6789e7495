package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.Seq;
import scala.jdk.javaapi.CollectionConverters;

/** What the tests feed the functions and read back from them, in Spark's shapes. */
final class Rows {

  private Rows() {}

  /**
   * The contract's checks as spark_purgatory.contract.rules.table_text renders them, with the
   * default limits and a largest timeout of 1000 (a fixture: the functions read whatever
   * table they are handed; the Python contract tests hand them the declaration itself).
   */
  static final String CHECKS =
      String.join(
          "\n",
          "missing_op_id\tabsent\top_id\t-\t-",
          "missing_key\tabsent\tkeys\t-\t-",
          "too_many_keys\tmore\tkeys\t1000\t-",
          "missing_ts\tabsent\tts\t-\t-",
          "bad_ts\tunreadable\tts\t-\t-",
          "ts_in_future\tfuture\tts\t-\t-",
          "missing_timeout_ms\tabsent\ttimeout_ms\t-\t-",
          "bad_timeout_ms\tunreadable\ttimeout_ms\t-\t-",
          "negative_timeout\tbelow\ttimeout_ms\t0\t-",
          "timeout_above_max\tabove\ttimeout_ms\t1000\t-",
          "unknown_condition\tunknown\tcondition\tany count sum all offset quorum\t-",
          "missing_target\tabsent\ttarget\t-\tcount sum offset quorum",
          "bad_target\tnot_finite\ttarget\t-\tcount sum offset quorum",
          "missing_members\tabsent\tmembers\t-\tall quorum",
          "too_many_members\tmore\tmembers\t1000\t-",
          "target_above_members\tabove\ttarget\tmembers\tquorum",
          "unused_target\tgiven\ttarget\t-\tany all",
          "unused_members\tgiven\tmembers\t-\tany count sum offset",
          "bad_warn_ms\tunreadable\twarn_ms\t-\t-",
          "bad_warn_ms\tbelow\twarn_ms\t1\t-",
          "bad_warn_ms\tabove\twarn_ms\ttimeout_ms\t-");

  /** A Scala sequence, as Spark passes an array column to a Java UDF. */
  static Seq<String> seq(String... items) {
    return CollectionConverters.asScala(Arrays.asList(items));
  }

  /** The roles in the order of spark_purgatory/shard/roles.py's ROLES: a copy carries its place. */
  static final String[] ROLES = {
    "op", "stub", "event", "replica", "bad", "claim", "wake", "end", "clock", "mark"
  };

  /** A sequence of strings as Spark passes an array of strings to a static call (null: null). */
  static ArrayData internal(Seq<String> items) {
    if (items == null) {
      return null;
    }
    List<UTF8String> out = new ArrayList<>();
    for (String item : CollectionConverters.asJava(items)) {
      out.add(OperationChecks.utf8(item));
    }
    return OperationRoutes.array(out);
  }

  /** A routes call's struct(reason, copies) as a Row of Java values, each role by its name. */
  static Row routed(InternalRow routed) {
    ArrayData copies = routed.getArray(1);
    List<Row> out = new ArrayList<>();
    for (int i = 0; i < copies.numElements(); i++) {
      InternalRow copy = copies.getStruct(i, 4);
      Integer peer = copy.isNullAt(2) ? null : copy.getInt(2);
      List<String> keys = OperationChecks.texts(OperationRows.list(copy.getArray(3)));
      out.add(RowFactory.create(copy.getInt(0), ROLES[copy.getByte(1)], peer, keys));
    }
    String reason = routed.isNullAt(0) ? null : routed.getUTF8String(0).toString();
    return RowFactory.create(reason, out);
  }

  /** The copies in field {@code i} of a routed row as "shard role peer [keys]" lines. */
  static List<String> copies(Row routed, int i) {
    List<Row> copies = list(routed, i);
    return copies.stream()
        .map(c -> c.get(0) + " " + c.get(1) + " " + c.get(2) + " " + c.get(3))
        .collect(Collectors.toList());
  }

  /** Field {@code i} of {@code row} read as a list (the functions return Java lists). */
  @SuppressWarnings("unchecked")
  static <T> List<T> list(Row row, int i) {
    return (List<T>) row.get(i);
  }
}
