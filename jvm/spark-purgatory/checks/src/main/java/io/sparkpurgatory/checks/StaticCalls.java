package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.analysis.FunctionRegistry;
import org.apache.spark.sql.catalyst.encoders.EncoderUtils;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.Coalesce;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;

import scala.Function1;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A static Java method as a Spark SQL function that Spark calls on its own values (UTF8String,
 * ArrayData, long, boolean, double, int; an InternalRow back), from its generated code: a
 * Catalyst {@code StaticInvoke}, where a Java UDF has every argument converted to a Java object
 * and its result converted back, row by row (for an array argument that conversion also reads
 * the session's settings each time on an executor).
 *
 * <p>Spark passes an argument's value without its null flag: a null long arrives as a number
 * (or the call is skipped), and a null string, in generated code, may arrive as whatever the
 * expression held last (a CASE's value kept from an earlier row).  So every argument arrives as
 * two: whether it is null, then its value (zero where a null number), which the method reads
 * only when not null.  A method {@code f(String a, Long b)} is thus written {@code f(boolean
 * aNull, UTF8String a, boolean bNull, long b)}; the SQL call keeps its arguments.
 */
public final class StaticCalls {

  private StaticCalls() {}

  /**
   * The version of the calls' signatures (the methods registered here and {@link BatchMillis})
   * and of the checks they and {@link OperationChecks} can make: raised whenever one changes (3:
   * the condition quorum, and the reasons target_above_members, unused_target, unused_members;
   * 4: the checks handed over as the contract's table, contract.rules.table_text, instead of
   * condition names and limits: a new check of a known test needs no new version; 5: warn_ms,
   * its value and absence, and the checks on it, an {@code above} bound by another number).
   * spark_purgatory/spark/checks.py calls a JAR only when its version is the one it was written
   * for, and reads the input as SQL otherwise: a JAR built from older sources would register
   * calls whose methods Spark cannot find, and fail the query, or check by older rules.
   */
  public static final int VERSION = 5;

  /** The zero that stands for a null of each primitive Java class (a literal of its type). */
  private static final Map<Class<?>, Object> ZEROS =
      Map.of(
          long.class, 0L,
          int.class, 0,
          double.class, 0.0,
          boolean.class, false,
          float.class, 0.0f,
          short.class, (short) 0,
          byte.class, (byte) 0);

  /**
   * Registers {@code name} in the session's {@code registry} as calls of the static method
   * {@code method} of {@code className}, returning {@code returnsJson} (a Spark type as JSON).
   * The method is found when a query names the function (Spark's analysis), by its arguments'
   * types, so a call with the wrong types fails there.
   */
  public static void register(
      FunctionRegistry registry, String name, String className, String method, String returnsJson)
      throws ClassNotFoundException {
    Class<?> cls = Class.forName(className, true, StaticCalls.class.getClassLoader());
    DataType returns = DataType.fromJson(returnsJson);
    Function1<Seq<Expression>, Expression> builder =
        arguments ->
            new StaticInvoke(
                cls, returns, method, flagged(arguments), seq(new ArrayList<AbstractDataType>()),
                false, false, true, Option.empty());
    registry.createOrReplaceTempFunction(name, builder, "java_udf");
  }

  /**
   * The arguments as the method takes them: each as (is null, value; zero for a null number).
   *
   * <p>Written as Spark's optimizer leaves them: a constant argument (literals and casts of
   * them) as two literals, a never-null one as {@code false} and itself.  A stream's plan is
   * optimized again in every micro-batch, and each rewrite the optimizer makes there (an
   * {@code isnull} of a literal folded, a {@code coalesce} of a never-null value dropped)
   * costs it another pass over the whole plan.
   */
  static Seq<Expression> flagged(Seq<Expression> arguments) {
    List<Expression> out = new ArrayList<>();
    for (Expression argument : CollectionConverters.asJava(arguments)) {
      Object zero = ZEROS.get(EncoderUtils.dataTypeJavaClass(argument.dataType()));
      if (constant(argument)) {
        Object value = argument.eval(null);
        out.add(new Literal(value == null, DataTypes.BooleanType));
        out.add(new Literal(value == null ? zero : value, argument.dataType()));
      } else if (!argument.nullable()) {
        out.add(new Literal(false, DataTypes.BooleanType));
        out.add(argument);
      } else {
        out.add(new IsNull(argument));
        if (zero == null) {
          out.add(argument);
        } else {
          List<Expression> valueOrZero = List.of(argument, new Literal(zero, argument.dataType()));
          out.add(new Coalesce(seq(valueOrZero)));
        }
      }
    }
    return seq(out);
  }

  /** A literal, or casts of one: a value known now (never a time or anything read per row). */
  static boolean constant(Expression expression) {
    if (expression instanceof Literal) {
      return true;
    }
    return expression instanceof Cast && constant(((Cast) expression).child());
  }

  private static <T> Seq<T> seq(List<T> items) {
    return CollectionConverters.asScala(items).toSeq();
  }
}
