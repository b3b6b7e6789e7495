package io.sparkpurgatory.checks;

import java.util.Arrays;
import java.util.List;

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

  /** Field {@code i} of {@code row} read as a list (the functions return Java lists). */
  @SuppressWarnings("unchecked")
  static <T> List<T> list(Row row, int i) {
    return (List<T>) row.get(i);
  }
}
