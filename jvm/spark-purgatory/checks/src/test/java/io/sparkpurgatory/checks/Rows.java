package io.sparkpurgatory.checks;

import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;

import org.apache.spark.sql.Row;

import scala.collection.Seq;
import scala.jdk.javaapi.CollectionConverters;

/** What the tests feed the functions and read back from them, in Spark's shapes. */
final class Rows {

  private Rows() {}

  /** A Scala sequence, as Spark passes an array column to a Java UDF. */
  static Seq<String> seq(String... items) {
    return CollectionConverters.asScala(Arrays.asList(items));
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
