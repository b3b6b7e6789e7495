"""``runtime.staged_sink``: a stream's micro-batches through the sink JAR's ``StagedRowsSink``
reach the committer as the rows ``foreachBatch`` would have given, once each, in order, each
after a ``begin`` heard before its tasks; a committer that raises fails the micro-batch (an
``abort`` follows a failed ``take``), which Spark runs again at the next start; where the sink
cannot be used the caller is told to use ``foreachBatch`` (None)."""

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


class _Committer:
    """What the committer heard, in order: ("begin",), ("take", batch_id), ("abort", batch_id);
    ``refuse``: a batch id whose ``take`` raises, or a count of ``begin`` calls after which
    ``begin`` raises."""

    def __init__(self, *, refuse_take: int | None = None, refuse_begin_after: int | None = None):
        self.heard: list[tuple] = []
        self.rows: dict[int, pa.Table] = {}
        self.refuse_take = refuse_take
        self.refuse_begin_after = refuse_begin_after

    def begin(self) -> None:
        if self.refuse_begin_after is not None and len(self.began()) >= self.refuse_begin_after:
            raise RuntimeError("the query is stopping")
        self.heard.append(("begin",))

    def take(self, rows: pa.Table, batch_id: int) -> None:
        if batch_id == self.refuse_take:
            raise RuntimeError(f"the store refused batch {batch_id}")
        self.heard.append(("take", batch_id))
        self.rows[batch_id] = rows

    def abort(self, batch_id: int) -> None:
        self.heard.append(("abort", batch_id))

    def began(self) -> list[tuple]:
        return [h for h in self.heard if h[0] == "begin"]


def _run(spark, folder: str, checkpoint: str, committer: _Committer) -> None:
    stream = spark.readStream.schema("id bigint").option("maxFilesPerTrigger", 1).parquet(folder)
    frame = _staged_like(stream.repartition(3))
    writer = staged_rows_writer(
        frame, STAGED, begin=committer.begin, take=committer.take, abort=committer.abort
    )
    assert writer is not None
    try:
        query = writer.stream().option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        query.awaitTermination()
    finally:
        writer.forget()


def test_each_micro_batch_reaches_the_committer_as_its_rows(spark, tmp_path):
    folder = _files(str(tmp_path), [5, 0, 7])
    committer = _Committer()
    _run(spark, folder, str(tmp_path / "chk"), committer)
    assert committer.heard == [("begin",), ("take", 0), ("begin",), ("take", 1), ("begin",), ("take", 2)]
    for batch_id, name in enumerate(["part-0", "part-1", "part-2"]):
        rows = committer.rows[batch_id]
        expected = _staged_like(spark.read.parquet(os.path.join(folder, f"{name}.parquet"))).toArrow()
        assert rows.schema == STAGED
        assert rows.sort_by("rows").equals(expected.select(STAGED.names).cast(STAGED).sort_by("rows"))
    assert committer.rows[2].column("name").to_pylist().count(AWKWARD + "7") == 1


def test_a_committer_that_raises_fails_the_micro_batch_and_it_runs_again(spark, tmp_path):
    folder = _files(str(tmp_path), [4, 4])
    checkpoint = str(tmp_path / "chk")
    committer = _Committer(refuse_take=1)
    with pytest.raises(StreamingQueryException) as failed:
        _run(spark, folder, checkpoint, committer)
    assert "RuntimeError: the store refused batch 1" in first_cause(failed.value)
    assert committer.heard == [("begin",), ("take", 0), ("begin",), ("abort", 1)]
    again = _Committer()
    _run(spark, folder, checkpoint, again)
    assert again.heard == [("begin",), ("take", 1)]  # not recorded as done: run again, the first not


def test_a_begin_that_raises_fails_the_micro_batch_before_its_tasks(spark, tmp_path):
    """How a stopping query refuses the next micro-batch (``PurgatorySink.begin_staged``):
    nothing of it is written or taken, no abort follows, and the next start runs it."""
    folder = _files(str(tmp_path), [4, 4])
    checkpoint = str(tmp_path / "chk")
    committer = _Committer(refuse_begin_after=1)
    with pytest.raises(StreamingQueryException) as failed:
        _run(spark, folder, checkpoint, committer)
    assert first_cause(failed.value).endswith("RuntimeError: the query is stopping")
    assert committer.heard == [("begin",), ("take", 0)]
    again = _Committer()
    _run(spark, folder, checkpoint, again)
    assert again.heard == [("begin",), ("take", 1)]


def test_where_the_sink_cannot_be_used_the_caller_is_told(spark, monkeypatch):
    stream = spark.readStream.format("rate").load()
    doubles = stream.select(F.col("value").cast("double").alias("d"))
    assert staged_rows_writer(doubles, pa.schema([("d", pa.float64())]), take=print) is None
    other = stream.select(F.col("value").alias("bytes"))
    assert staged_rows_writer(other, STAGED, take=print) is None  # not the schema's columns
    import spark_purgatory.runtime.staged_sink as staged_sink

    monkeypatch.setattr(staged_sink, "jvm_class", lambda *args: None)  # no JAR on the driver
    assert (
        staged_rows_writer(_staged_like(stream.select(F.col("value").alias("id"))), STAGED, take=print)
        is None
    )
