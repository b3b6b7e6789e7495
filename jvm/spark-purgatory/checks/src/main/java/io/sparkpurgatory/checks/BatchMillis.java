package io.sparkpurgatory.checks;

import java.io.Serializable;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry;
import org.apache.spark.sql.catalyst.analysis.TypeCheckResult;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;

import scala.Function1;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A micro-batch's time (epoch milliseconds: its argument, {@code unix_millis(current_timestamp())})
 * that Spark's generated code reads from the code's references, not as a number written into the
 * code: the code is then the same in every micro-batch, so Spark compiles it once.
 *
 * <p>A stream's {@code current_timestamp()} is its micro-batch's time, which Spark puts in the
 * plan as a constant after it optimizes the plan; an expression over that constant writes the
 * number into the code it generates, and Spark compiled the input's whole reading again in every
 * micro-batch.  Read through a lambda instead, the time kept the projection that holds it out of
 * generated code (rows interpreted one by one, and the projection serialized on the driver every
 * micro-batch).  This expression is generated code, and writes only a reference to the value.
 * It is never folded (the optimizer would fold it into a constant again); where its argument is
 * not a constant when the code is generated, its code is the argument's own.
 */
public final class BatchMillis extends Expression implements Serializable {

  private static final long serialVersionUID = 1L;

  private final Expression child;
  private final Seq<Expression> children;

  public BatchMillis(Expression child) {
    this.child = child;
    this.children = CollectionConverters.asScala(List.of(child)).toSeq();
  }

  /** Registers {@code name} in the session's {@code registry}: {@code name(millis)}. */
  public static void register(FunctionRegistry registry, String name) {
    Function1<Seq<Expression>, Expression> builder =
        arguments -> {
          if (arguments.size() != 1) {
            throw new IllegalArgumentException(name + " takes one argument, the epoch milliseconds");
          }
          return new BatchMillis(arguments.head());
        };
    registry.createOrReplaceTempFunction(name, builder, "java_udf");
  }

  /** One whole number of milliseconds, or the analysis fails (not the micro-batch's code). */
  @Override
  public TypeCheckResult checkInputDataTypes() {
    if (child.dataType().equals(DataTypes.LongType)) {
      return TypeCheckResult.TypeCheckSuccess$.MODULE$;
    }
    return new TypeCheckResult.TypeCheckFailure(
        "batch_millis takes epoch milliseconds (bigint), not " + child.dataType().simpleString());
  }

  public Expression child() {
    return child;
  }

  @Override
  public Seq<Expression> children() {
    return children;
  }

  @Override
  public DataType dataType() {
    return DataTypes.LongType;
  }

  @Override
  public boolean nullable() {
    return child.nullable();
  }

  @Override
  public boolean foldable() {
    return false;
  }

  @Override
  public Object eval(InternalRow input) {
    return child.eval(input);
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    if (!child.foldable()) {
      return child.genCode(ctx);
    }
    Object millis = child.eval(null);
    if (millis == null) {
      return ExprCode.forNullValue(DataTypes.LongType);
    }
    String holder = ctx.addReferenceObj("batchMillis", new long[] {(Long) millis}, "long[]");
    return ExprCode.forNonNullValue(JavaCode.expression(holder + "[0]", DataTypes.LongType));
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
    return new BatchMillis(newChildren.head());
  }

  @Override
  public String prettyName() {
    return "spark_purgatory_batch_millis";
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
    return child;
  }

  @Override
  public boolean canEqual(Object that) {
    return that instanceof BatchMillis;
  }

  @Override
  public boolean equals(Object that) {
    return that instanceof BatchMillis && child.equals(((BatchMillis) that).child);
  }

  @Override
  public int hashCode() {
    return 31 * BatchMillis.class.hashCode() + child.hashCode();
  }
}
