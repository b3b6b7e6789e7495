"""``runtime.staged_sink``: a stream's micro-batches through the sink JAR's ``StagedRowsSink``
reach the committer as the rows ``foreachBatch`` would have given, once each, in order; a
committer that raises fails the micro-batch, which Spark runs again at the next start; where the
sink cannot be used the caller is told to use ``foreachBatch`` (None)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from spark_purgatory.delta.staging import STAGED
from spark_purgatory.runtime.staged_sink import staged_rows_writer
from spark_purgatory.spark.errors import first_cause
from tests.support.staged_rows import AWKWARD, staged_columns

pytestmark = [pytest.mark.spark, pytest.mark.jars("checks")]


def _staged_like(frame):
    """``STAGED``'s columns from ``id`` in reverse order: the committer puts them in the
    schema's (``staged_columns``)."""
    return frame.select(*staged_columns(reverse=True))


def _files(root: str, sizes: list[int]) -> str:
    folder = os.path.join(root, "in")
    os.makedirs(folder)
    start = 0
    for i, n in enumerate(sizes):
        path = os.path.join(folder, f"part-{i}.parquet")
        pq.write_table(pa.table({"id": pa.array(range(start, start + n), pa.int64())}), path)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # taken in this order
        start += n
    return folder


def _run(spark, folder: str, checkpoint: str, take) -> None:
    stream = spark.readStream.schema("id bigint").option("maxFilesPerTrigger", 1).parquet(folder)
    writer = staged_rows_writer(_staged_like(stream.repartition(3)), take, STAGED)
    assert writer is not None
    try:
        query = writer.stream().option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        query.awaitTermination()
    finally:
        writer.forget()


def test_each_micro_batch_reaches_the_committer_as_its_rows(spark, tmp_path):
    folder = _files(str(tmp_path), [5, 0, 7])
    taken: list[tuple[int, pa.Table]] = []
    _run(spark, folder, str(tmp_path / "chk"), lambda rows, batch_id: taken.append((batch_id, rows)))
    assert [batch_id for batch_id, _ in taken] == [0, 1, 2]
    for (_, rows), name in zip(taken, ["part-0", "part-1", "part-2"], strict=True):
        expected = _staged_like(spark.read.parquet(os.path.join(folder, f"{name}.parquet"))).toArrow()
        assert rows.schema == STAGED
        assert rows.sort_by("rows").equals(expected.select(STAGED.names).cast(STAGED).sort_by("rows"))
    assert taken[2][1].column("name").to_pylist().count(AWKWARD + "7") == 1


def test_a_committer_that_raises_fails_the_micro_batch_and_it_runs_again(spark, tmp_path):
    folder = _files(str(tmp_path), [4, 4])
    checkpoint = str(tmp_path / "chk")
    taken: list[int] = []

    def refuse_the_second(rows: pa.Table, batch_id: int) -> None:
        if batch_id == 1:
            raise RuntimeError("the store refused batch 1")
        taken.append(batch_id)

    with pytest.raises(StreamingQueryException) as failed:
        _run(spark, folder, checkpoint, refuse_the_second)
    assert "RuntimeError: the store refused batch 1" in first_cause(failed.value)
    assert taken == [0]
    _run(spark, folder, checkpoint, lambda rows, batch_id: taken.append(batch_id))
    assert taken == [0, 1]  # not recorded as done: run again, the first not again


def test_where_the_sink_cannot_be_used_the_caller_is_told(spark, monkeypatch):
    stream = spark.readStream.format("rate").load()
    doubles = stream.select(F.col("value").cast("double").alias("d"))
    assert staged_rows_writer(doubles, print, pa.schema([("d", pa.float64())])) is None
    other = stream.select(F.col("value").alias("bytes"))
    assert staged_rows_writer(other, print, STAGED) is None  # not the schema's columns
    import spark_purgatory.runtime.staged_sink as staged_sink

    monkeypatch.setattr(staged_sink, "jvm_class", lambda *args: None)  # no JAR on the driver
    assert staged_rows_writer(_staged_like(stream.select(F.col("value").alias("id"))), print, STAGED) is None
