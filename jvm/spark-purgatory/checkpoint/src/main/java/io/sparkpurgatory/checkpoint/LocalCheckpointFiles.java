package io.sparkpurgatory.checkpoint;

import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager, minus a process per file on the local file system: what
 * spark_purgatory/spark/settings.py (checkpoint_files) explains.
 *
 * <p>Spark writes every log of a streaming query (each file source's, the offsets, the commits,
 * the state store's delta files) as a temporary file renamed into place, through Hadoop's
 * FileContext by default; Hadoop's local FileContext resolves links before a rename by running
 * the readlink command (Hadoop 3.5.0, FileUtil.readLink), a process per file.  For a path on the
 * local file system this manager is Spark's FileSystem-based one, which renames in the JVM (the
 * same POSIX rename); for any other path it is whatever Spark itself would choose
 * (CheckpointFileManager.create without this setting), so a session may name it for every query.
 */
public final class LocalCheckpointFiles implements CheckpointFileManager {

  /** The setting Spark reads the manager's class from (Spark's SQLConf, internal). */
  static final String SETTING = "spark.sql.streaming.checkpointFileManagerClass";

  private final CheckpointFileManager delegate;

  public LocalCheckpointFiles(Path path, Configuration conf) {
    this.delegate =
        isLocal(path, conf) ? new FileSystemBasedCheckpointFileManager(path, conf) : sparks(path, conf);
  }

  static boolean isLocal(Path path, Configuration conf) {
    try {
      return "file".equals(path.getFileSystem(conf).getScheme());
    } catch (IOException | RuntimeException e) {
      return false;
    }
  }

  /** The manager Spark picks when no class is named (FileContext, else FileSystem). */
  private static CheckpointFileManager sparks(Path path, Configuration conf) {
    Configuration unnamed = new Configuration(conf);
    unnamed.unset(SETTING);
    return CheckpointFileManager.create(path, unnamed);
  }

  /** The manager this one delegates to (tests). */
  public CheckpointFileManager delegate() {
    return delegate;
  }

  @Override
  public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(
      Path path, boolean overwriteIfPossible) {
    return delegate.createAtomic(path, overwriteIfPossible);
  }

  @Override
  public FSDataInputStream open(Path path) {
    return delegate.open(path);
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return delegate.list(path, filter);
  }

  @Override
  public FileStatus[] list(Path path) {
    return delegate.list(path);
  }

  @Override
  public void mkdirs(Path path) {
    delegate.mkdirs(path);
  }

  @Override
  public boolean exists(Path path) {
    return delegate.exists(path);
  }

  @Override
  public void delete(Path path) {
    delegate.delete(path);
  }

  @Override
  public boolean isLocal() {
    return delegate.isLocal();
  }

  @Override
  public Path createCheckpointDirectory() {
    return delegate.createCheckpointDirectory();
  }

  @Override
  public void close() {
    delegate.close();
  }
}
