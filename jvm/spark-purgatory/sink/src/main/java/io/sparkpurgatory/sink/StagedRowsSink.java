package io.sparkpurgatory.sink;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.execution.streaming.sources.PackedRowCommitMessage;
import org.apache.spark.sql.execution.streaming.sources.PackedRowWriterFactory$;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A streaming sink that hands each micro-batch's few rows to a {@link BatchCommitter} on the
 * driver: what spark_purgatory/runtime/staged_sink.py explains.
 *
 * <p>The shards stage their own output; what reaches the sink is a row per staged file and per
 * shard call.  Through {@code foreachBatch} Spark analyses the micro-batch's plan again as a new
 * DataFrame, the Python function runs the batch's one action as a second pass over its physical
 * plan, and only then do the rows come back.  Here the rows are written as Spark writes to any
 * sink of this kind (Spark's own {@code noop} is one): each task's rows travel with its commit
 * message (Spark's own {@code PackedRowWriterFactory}, that of its memory sink: no class of this
 * JAR runs in a task or travels in a message, so executors need not load it), and the driver's
 * commit hands them, as one JSON text of columns, to the committer named by the option {@code
 * committer} ({@link #register}).
 *
 * <p>Only strings, whole numbers and booleans are written (the schema is checked when the write
 * is planned).  The committer hears of each micro-batch as its write begins, before any task runs
 * ({@link BatchCommitter#begin}: where a stopping query refuses it, as a {@code foreachBatch}
 * function refuses a micro-batch before it runs any job), at its commit, and when it fails
 * after it began ({@link BatchCommitter#abort}).  A committer's throw fails the micro-batch
 * before Spark records it, as a throw in a {@code foreachBatch} function does.
 */
public final class StagedRowsSink implements TableProvider {

  /** The version of this class's calls (spark_purgatory/runtime/staged_sink.py compares it). */
  public static final int VERSION = 2;

  /** The option naming the committer (its key in {@link #register}). */
  public static final String COMMITTER = "committer";

  private static final Map<String, BatchCommitter> COMMITTERS = new ConcurrentHashMap<>();

  /** Names {@code committer} {@code key} for the queries whose option {@code committer} is it. */
  public static void register(String key, BatchCommitter committer) {
    COMMITTERS.put(key, committer);
  }

  /** Forgets committer {@code key} (a stopped query's). */
  public static void unregister(String key) {
    COMMITTERS.remove(key);
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return new StructType();
  }

  @Override
  public org.apache.spark.sql.connector.catalog.Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    String key = properties.get(COMMITTER);
    if (key == null) {
      throw new IllegalArgumentException("StagedRowsSink: the option '" + COMMITTER + "' is not set");
    }
    return new Table(key);
  }

  static final class Table implements SupportsWrite {
    private final String key;

    Table(String key) {
      this.key = key;
    }

    @Override
    public String name() {
      return "spark-purgatory staged rows (" + key + ")";
    }

    @Override
    public StructType schema() {
      return new StructType();
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.STREAMING_WRITE, TableCapability.ACCEPT_ANY_SCHEMA);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      StructType schema = info.schema();
      SmallRows.checkWritten("StagedRowsSink", schema.fields());
      return new WriteBuilder() {
        @Override
        public Write build() {
          return new Write() {
            @Override
            public String description() {
              return name();
            }

            @Override
            public StreamingWrite toStreaming() {
              return new Streaming(key, schema);
            }
          };
        }
      };
    }
  }

  static final class Streaming implements StreamingWrite {
    private final String key;
    private final StructType schema;

    Streaming(String key, StructType schema) {
      this.key = key;
      this.schema = schema;
    }

    /** Called on the driver as each micro-batch's write begins, before its job. */
    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
      committer().begin();
      return PackedRowWriterFactory$.MODULE$;  // Spark's: each task's rows, copied, in its message
    }

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {
      committer().commit(epochId, joined(schema, messages));
    }

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {
      // nothing to undo here: a task's rows name staged files no record took, which the next
      // record sweeps; the committer learns that the micro-batch it began is over
      committer().abort(epochId);
    }

    private BatchCommitter committer() {
      BatchCommitter committer = COMMITTERS.get(key);
      if (committer == null) {
        throw new IllegalStateException("StagedRowsSink: no committer '" + key + "' in this driver");
      }
      return committer;
    }
  }

  /** The tasks' rows as one JSON text of columns (the text {@link SmallRows#columns} writes). */
  static String joined(StructType schema, WriterCommitMessage[] messages) {
    List<InternalRow> rows = new ArrayList<>();
    for (WriterCommitMessage message : messages) {
      if (message != null) {
        rows.addAll(Arrays.asList(((PackedRowCommitMessage) message).rows()));
      }
    }
    return SmallRows.text(schema.fields(), rows.toArray(new InternalRow[0]));
  }
}
