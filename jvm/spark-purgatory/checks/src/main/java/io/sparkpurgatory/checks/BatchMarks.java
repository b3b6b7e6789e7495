package io.sparkpurgatory.checks;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Generator;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenFallback;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Enumeration;
import scala.Function1;
import scala.collection.IterableOnce;
import scala.collection.Iterator$;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The routed rows as they are, and at the end of each Spark partition one <em>mark</em> per
 * input and shard group: the largest event time of that input's rows in the partition.
 *
 * <p>Spark applies the watermark a micro-batch's rows propose only in the next micro-batch.  A
 * shard can move there inside the micro-batch (spark_purgatory/shard/input.py,
 * {@code batch_watermark}), but its own rows show only its part of each input, so it stops short
 * of Spark's next watermark by however far the other shards' rows reach.  The marks carry every
 * partition's maximum to every shard group: with the marks of all partitions of both inputs, a
 * shard's proposal is exactly the one Spark computes after the micro-batch (the largest event
 * time of each input's rows that its watermark saw, rows rejected at parse not counted: they
 * stand at the epoch there, spark_purgatory/spark/input_stream.py).
 *
 * <p>A Catalyst generator: Spark calls {@link #terminate} once its partition's rows are through
 * ({@code GenerateExec}, never in generated code: {@link #supportCodegen} is false).  A
 * replayed micro-batch reads the same partitions, so it gets the same marks.
 *
 * <p>SQL: {@code spark_purgatory_batch_marks(labels, mark_role, bad_role, inputs, col1, ...,
 * colN) AS (col1, ..., colN)}: the shard groups' labels (array&lt;int&gt;), the role numbers
 * of a mark and of a row rejected at parse, how many sides are inputs (sides 0 to inputs - 1;
 * the others, the wake's, carry no event time), then every column of the routed rows, which
 * must include {@code shard}, {@code role}, {@code side} and {@code ts_ms}.
 */
public final class BatchMarks extends Expression
    implements Generator, CodegenFallback, Serializable {

  private static final long serialVersionUID = 1L;

  /** The columns a mark sets: the rest are null (or a zero where the column is never null). */
  static final String SHARD = "shard";
  static final String ROLE = "role";
  static final String SIDE = "side";
  static final String TS_MS = "ts_ms";

  private final Seq<Expression> children;
  private final int[] labels;
  private final byte markRole;
  private final byte badRole;
  private final int inputs;
  private final StructType schema;
  private final int shard;
  private final int role;
  private final int side;
  private final int ts;
  /** A mark's values before it is set: null, or a zero where a column is never null. */
  private final Object[] blank;
  /** Are the columns the input row's own, in its order (the bound plan: a row passes as it is)? */
  private final boolean passes;
  private Seq<Enumeration.Value> nodePatterns;

  /** This partition's marks so far (an instance per task: Spark deserializes the plan in each). */
  private transient PartitionMarks partition;

  BatchMarks(
      Seq<Expression> children, int[] labels, byte markRole, byte badRole, int inputs,
      StructType schema) {
    this.children = children;
    this.labels = labels;
    this.markRole = markRole;
    this.badRole = badRole;
    this.inputs = inputs;
    this.schema = schema;
    this.shard = schema.fieldIndex(SHARD);
    this.role = schema.fieldIndex(ROLE);
    this.side = schema.fieldIndex(SIDE);
    this.ts = schema.fieldIndex(TS_MS);
    StructField[] fields = schema.fields();
    this.blank = new Object[fields.length];
    for (int i = 0; i < fields.length; i++) {
      blank[i] = fields[i].nullable() ? null : zero(fields[i].dataType());
    }
    this.passes = passesThrough(children);
    Generator.$init$(this);
    CodegenFallback.$init$(this);
  }

  /**
   * Registers {@code name} in the session's {@code registry}: {@code name(labels, mark_role,
   * bad_role, inputs, columns...)} (the class comment).  The first four arguments are constants;
   * the columns' names and types make the rows' schema, their metadata kept (the watermark's
   * column stays one).
   */
  public static void register(FunctionRegistry registry, String name) {
    Function1<Seq<Expression>, Expression> builder =
        arguments -> {
          List<Expression> given = CollectionConverters.asJava(arguments);
          if (given.size() < 8) {
            throw new IllegalArgumentException(
                name + " takes the labels, the mark's and a rejected row's roles, the inputs, then"
                    + " the routed columns");
          }
          ArrayData labelData = (ArrayData) given.get(0).eval(null);
          int[] labels = labelData.toIntArray();
          byte markRole = ((Number) given.get(1).eval(null)).byteValue();
          byte badRole = ((Number) given.get(2).eval(null)).byteValue();
          int inputs = ((Number) given.get(3).eval(null)).intValue();
          List<Expression> columns = given.subList(4, given.size());
          List<StructField> fields = new ArrayList<>();
          for (Expression column : columns) {
            if (!(column instanceof NamedExpression)) {
              throw new IllegalArgumentException(name + " takes the routed columns by name");
            }
            NamedExpression named = (NamedExpression) column;
            fields.add(
                new StructField(
                    named.name(), column.dataType(), column.nullable(), named.metadata()));
          }
          StructType schema = new StructType(fields.toArray(new StructField[0]));
          return new BatchMarks(seq(columns), labels, markRole, badRole, inputs, schema);
        };
    registry.createOrReplaceTempFunction(name, builder, "java_udf");
  }

  @Override
  public StructType elementSchema() {
    return schema;
  }

  /** The row itself (after the plan is bound, the columns are the input's, in its order). */
  @Override
  public IterableOnce<InternalRow> eval(InternalRow input) {
    InternalRow row = passes ? input : evaluated(input);
    if (partition == null) {
      partition = new PartitionMarks(labels, markRole, badRole, inputs, shard, role, side, ts, blank);
    }
    partition.note(row);
    return Iterator$.MODULE$.single(row);
  }

  /** Each input's mark for every shard group, for the inputs that had rows in the partition. */
  @Override
  public IterableOnce<InternalRow> terminate() {
    List<InternalRow> marks = partition == null ? List.of() : partition.marks();
    return CollectionConverters.asScala(marks.iterator());
  }

  /** A value of a column that is never null, for a mark, which has none of its own. */
  private static Object zero(DataType type) {
    if (type instanceof IntegerType) {
      return 0;
    } else if (type instanceof LongType || type instanceof TimestampType) {
      return 0L;
    } else if (type instanceof ByteType) {
      return (byte) 0;
    } else if (type instanceof DoubleType) {
      return 0.0;
    } else if (type instanceof BooleanType) {
      return false;
    } else if (type instanceof StringType) {
      return UTF8String.EMPTY_UTF8;
    }
    throw new IllegalArgumentException("a routed column of type " + type.simpleString());
  }

  /** Are {@code children} the input row's own columns, in its order (the bound plan's case)? */
  private static boolean passesThrough(Seq<Expression> children) {
    int i = 0;
    for (Expression child : CollectionConverters.asJava(children)) {
      if (!(child instanceof BoundReference) || ((BoundReference) child).ordinal() != i) {
        return false;
      }
      i++;
    }
    return true;
  }

  private InternalRow evaluated(InternalRow input) {
    List<Expression> columns = CollectionConverters.asJava(children);
    Object[] values = new Object[columns.size()];
    for (int i = 0; i < values.length; i++) {
      values[i] = columns.get(i).eval(input);
    }
    return new GenericInternalRow(values);
  }

  @Override
  public boolean supportCodegen() {
    return false;
  }

  @Override
  public Seq<Expression> children() {
    return children;
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
    return new BatchMarks(newChildren, labels, markRole, badRole, inputs, schema);
  }

  @Override
  public DataType dataType() {
    return Generator.super.dataType();
  }

  @Override
  public boolean nullable() {
    return false;
  }

  @Override
  public boolean foldable() {
    return false;
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    return CodegenFallback.super.doGenCode(ctx, ev);
  }

  @Override
  public Seq<Enumeration.Value> nodePatterns() {
    return nodePatterns;
  }

  @Override
  public void org$apache$spark$sql$catalyst$expressions$Generator$_setter_$nodePatterns_$eq(
      Seq<Enumeration.Value> patterns) {
    this.nodePatterns = patterns;
  }

  @Override
  public String prettyName() {
    return "spark_purgatory_batch_marks";
  }

  @Override
  public int productArity() {
    return 1;
  }

  @Override
  public Object productElement(int n) {
    if (n != 0) {
      throw new IndexOutOfBoundsException(n);
    }
    return children;
  }

  @Override
  public boolean canEqual(Object that) {
    return that instanceof BatchMarks;
  }

  @Override
  public boolean equals(Object that) {
    if (!(that instanceof BatchMarks)) {
      return false;
    }
    BatchMarks other = (BatchMarks) that;
    return children.equals(other.children)
        && Arrays.equals(labels, other.labels)
        && markRole == other.markRole
        && badRole == other.badRole
        && inputs == other.inputs;
  }

  @Override
  public int hashCode() {
    return 31 * (31 * BatchMarks.class.hashCode() + children.hashCode())
        + Arrays.hashCode(labels);
  }

  private static <T> Seq<T> seq(List<T> items) {
    return CollectionConverters.asScala(items).toSeq();
  }
}
