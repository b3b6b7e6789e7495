package io.sparkpurgatory.sink;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;

/**
 * A micro-batch's few result rows, run and handed to the driver's Python as one JSON text:
 * what spark_purgatory/runtime/small_rows.py explains.
 *
 * <p>A foreachBatch function that calls toArrow (or collect) on its micro-batch starts a second
 * SQL execution inside the micro-batch's own (with its plan's description and listener events)
 * and a socket server for the rows.  For the sink's handful of rows (a row per staged file and per
 * shard call) that costs more than the rows: this runs the same physical plan, within the
 * micro-batch's execution, and returns the rows as text through the Py4J call itself.
 *
 * <p>The text is a JSON array of columns, each an array of the column's values in row order
 * (null for a null); only strings, whole numbers and booleans are written (columns(Dataset)
 * refuses any other type before it runs anything).
 */
public final class SmallRows {

  private SmallRows() {}

  /** The version of this class's calls (spark_purgatory/runtime/small_rows.py compares it). */
  public static final int VERSION = 1;

  /**
   * Runs {@code batch}'s plan and returns its rows as JSON columns.
   *
   * @throws IllegalArgumentException when a column is of a type other than string, bigint, int,
   *     smallint, tinyint or boolean (nothing was run)
   */
  public static String columns(Dataset<?> batch) {
    StructField[] fields = batch.schema().fields();
    checkWritten("SmallRows", fields);
    return text(fields, batch.queryExecution().executedPlan().executeCollect());
  }

  /**
   * Refuses {@code fields} of a type the text does not carry ({@link #written}), naming {@code
   * who} asked.
   */
  static void checkWritten(String who, StructField[] fields) {
    for (StructField field : fields) {
      if (!written(field.dataType())) {
        throw new IllegalArgumentException(
            who + ": column " + field.name() + " is of type " + field.dataType().simpleString()
                + " (only strings, whole numbers and booleans)");
      }
    }
  }

  /** {@code rows} of {@code fields} as JSON columns (fields of the types {@link #written}). */
  static String text(StructField[] fields, InternalRow[] rows) {
    StringBuilder out = new StringBuilder(64 + rows.length * fields.length * 8);
    out.append('[');
    for (int c = 0; c < fields.length; c++) {
      out.append(c == 0 ? "[" : ",[");
      DataType type = fields[c].dataType();
      for (int r = 0; r < rows.length; r++) {
        if (r > 0) {
          out.append(',');
        }
        value(out, rows[r], c, type);
      }
      out.append(']');
    }
    return out.append(']').toString();
  }

  static boolean written(DataType type) {
    return type.equals(DataTypes.StringType)
        || type.equals(DataTypes.LongType)
        || type.equals(DataTypes.IntegerType)
        || type.equals(DataTypes.ShortType)
        || type.equals(DataTypes.ByteType)
        || type.equals(DataTypes.BooleanType);
  }

  private static void value(StringBuilder out, InternalRow row, int c, DataType type) {
    if (row.isNullAt(c)) {
      out.append("null");
    } else if (type.equals(DataTypes.StringType)) {
      quoted(out, row.getUTF8String(c).toString());
    } else if (type.equals(DataTypes.LongType)) {
      out.append(row.getLong(c));
    } else if (type.equals(DataTypes.IntegerType)) {
      out.append(row.getInt(c));
    } else if (type.equals(DataTypes.ShortType)) {
      out.append(row.getShort(c));
    } else if (type.equals(DataTypes.ByteType)) {
      out.append(row.getByte(c));
    } else {
      out.append(row.getBoolean(c));
    }
  }

  /** A JSON string: quote, backslash and control characters escaped, the rest as it is. */
  static void quoted(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char ch = text.charAt(i);
      if (ch == '"' || ch == '\\') {
        out.append('\\').append(ch);
      } else if (ch < 0x20) {
        out.append(String.format("\\u%04x", (int) ch));
      } else {
        out.append(ch);
      }
    }
    out.append('"');
  }
}
