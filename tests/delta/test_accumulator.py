"""RecordAccumulator and Delta sinks: batching, linger, memory, exactly-once, schemas.

No Spark here: the sink is fed Arrow rows shaped like the operator's output, and the Delta
tables are real (delta-rs) and read back with ``deltalake``.
"""

from __future__ import annotations

import datetime as dt
import types

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import spark_purgatory
from spark_purgatory.config import ConfigError
from spark_purgatory.contract import OPERATOR_OUTPUT, TABLES
from spark_purgatory.delta.accumulator import FAULT_POINTS, RecordAccumulator
from spark_purgatory.delta.sink import PurgatorySink
from spark_purgatory.delta.staging import split_tables
from spark_purgatory.delta.writers import (
    DeltaRsWriter,
    SparkDeltaWriter,
    choose_writer,
    delta_added_locally,
    delta_classes_available,
    maintain_tables,
)
from spark_purgatory.runtime.jars import jar_paths

T0 = 1_767_225_600_000  # 2026-01-01


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, ms: int) -> None:
        self.t += ms / 1000


def output_rows(
    n_outcomes: int, *, start: int = 0, n_unmatched: int = 0, n_rejected: int = 0, day_ms: int = 0
) -> pa.Table:
    """Rows as the streaming operator emits them (``contract.OPERATOR_OUTPUT``)."""
    rows = []
    for i in range(start, start + n_outcomes):
        rows.append(
            {
                "kind": "outcome",
                "shard": 0,
                "op_id": f"op-{i}",
                "keys": [f"k{i}"],
                "status": "completed",
                "op_ts_ms": T0 + day_ms + i,
                "deadline_ms": T0 + day_ms + i + 1000,
                "resolved_at_ms": T0 + day_ms + i + 5,
                "latency_ms": 5,
                "matched_events": 1,
                "progress": 1.0,
                "condition": "any",
                "payload": "x" * 50,
            }
        )
    for i in range(n_unmatched):
        rows.append(
            {"kind": "unmatched", "shard": 0, "key": f"u{i}", "ts_ms": T0 + i, "reason": "no_operation"}
        )
    for _ in range(n_rejected):
        rows.append(
            {
                "kind": "rejected",
                "shard": 0,
                "source": "operations",
                "raw": "{bad",
                "reason": "malformed_json",
            }
        )
    rows.append(
        {"kind": "metrics", "shard": 0, "pending": 7, "buffered": 0, "watched": 7, "watermark_ms": T0}
    )
    return pa.Table.from_pylist(rows, schema=OPERATOR_OUTPUT)


def make_sink(tmp_path, clock: Clock, **settings) -> PurgatorySink:
    params = {"batch_size": 64 * 1024, "linger_ms": 60_000, "buffer_memory": 1 << 30}
    params.update(settings)
    acc = RecordAccumulator(str(tmp_path / "staging"), app_id="query-1", clock=clock, **params)
    return PurgatorySink(acc, DeltaRsWriter(str(tmp_path / "out")))


def table_rows(tmp_path, name: str) -> int:
    path = tmp_path / "out" / name
    if not (path / "_delta_log").exists():
        return 0
    return DeltaTable(str(path)).to_pyarrow_table().num_rows


def outcome_rows_staged(sink: PurgatorySink) -> int:
    return sum(d.rows for d in sink.accumulator.destinations() if d.table == "outcomes")


def data_files(tmp_path, name: str) -> list[int]:
    """Sizes of the table's current data files."""
    actions = pa.table(DeltaTable(str(tmp_path / "out" / name)).get_add_actions(flatten=True))
    return actions.column("size_bytes").to_pylist()


# -- Kafka's ready(): full, lingered, flush, memory -------------------------------------------------


def test_rows_wait_until_the_destination_reaches_batch_size(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=5_000)
    for batch in range(10):
        sink.process(output_rows(20, start=batch * 20), batch)
        clock.advance(100)
    # ~20 rows, ~2 kB of Parquet per batch: a commit only when a destination holds >= batch.size
    commits = DeltaTable(str(tmp_path / "out" / "outcomes")).history()
    writes = [c for c in commits if c.get("operation") == "WRITE"]
    assert 1 <= len(writes) < 10
    assert table_rows(tmp_path, "outcomes") + outcome_rows_staged(sink) == 200


def test_linger_ms_is_honoured_with_an_injected_clock(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, linger_ms=5_000)
    sink.process(output_rows(3), 0)
    clock.advance(4_999)
    assert sink.accumulator.ready() == []
    sink.process(output_rows(0), 1)
    assert table_rows(tmp_path, "outcomes") == 0
    clock.advance(1)
    figures = sink.process(output_rows(0), 2)
    assert table_rows(tmp_path, "outcomes") == 3
    assert figures["committed"][0]["reasons"] == ["lingered"]
    assert figures["committed"][0]["waited_ms"] == 5_000


def test_buffer_memory_bounds_what_is_staged(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=64 << 10, buffer_memory=64 << 10)
    for day in range(8):  # eight destinations (days) of ~30 kB of Parquet, none full on its own
        sink.process(output_rows(1000, start=day * 1000, day_ms=day * 86_400_000), day)
    assert sink.accumulator.buffered_bytes <= 64 << 10
    committed = DeltaTable(str(tmp_path / "out" / "outcomes")).history()
    assert any("WRITE" == c.get("operation") for c in committed)
    assert table_rows(tmp_path, "outcomes") + outcome_rows_staged(sink) == 8000


def _at(rows: pa.Table, batch_time_ms: int) -> pa.Table:
    """``rows`` whose metrics row says Spark's batch time."""
    column = rows.schema.get_field_index("batch_time_ms")
    times = [batch_time_ms if kind == "metrics" else None for kind in rows.column("kind").to_pylist()]
    return rows.set_column(column, "batch_time_ms", pa.array(times, pa.int64()))


def test_rows_whose_linger_ends_before_the_next_trigger_can_start_are_committed_at_once(tmp_path):
    """Triggers 1 s apart, linger 500 ms: no row can join those of a micro-batch before its
    linger ends, so waiting would only delay them; with triggers closer than the linger the
    rows wait for the next micro-batch's and go in one commit."""
    clock = Clock(1_800_000_000.3)  # 300 ms into Spark's trigger interval
    acc = RecordAccumulator(
        str(tmp_path / "staging"),
        app_id="q",
        clock=clock,
        batch_size=1 << 20,
        linger_ms=500,
        buffer_memory=1 << 30,
    )
    sink = PurgatorySink(acc, DeltaRsWriter(str(tmp_path / "out")), trigger_interval_ms=1_000)
    figures = sink.process(_at(output_rows(3), 1_800_000_000_010), 0)
    assert table_rows(tmp_path, "outcomes") == 3 and figures["committed"][0]["reasons"] == ["lingered"]
    clock.t = 1_800_000_000.7  # linger would end at .2 of the next interval, after its trigger
    sink.process(_at(output_rows(2, start=3), 1_800_000_000_600), 1)
    assert table_rows(tmp_path, "outcomes") == 3 and outcome_rows_staged(sink) == 2
    clock.advance(500)
    sink.process(_at(output_rows(1, start=5), 1_800_000_001_000), 2)
    assert table_rows(tmp_path, "outcomes") == 6  # together


def test_lingered_rows_are_committed_between_micro_batches(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, linger_ms=1_000)
    sink.process(output_rows(3), 0)
    assert sink.drain_lingering() == []  # not yet
    clock.advance(1_000)
    committed = sink.drain_lingering()  # no new micro-batch: the timer commits
    assert [c["table"] for c in committed] == ["metrics", "outcomes"]  # the batch's metrics row too
    assert {c["version"] for c in committed} == {1} and table_rows(tmp_path, "outcomes") == 3
    sink.process(output_rows(2, start=3), 1)
    clock.advance(1_000)
    sink.process(output_rows(0), 2)
    sink.close()
    assert table_rows(tmp_path, "outcomes") == 5


def test_close_flushes_everything_and_files_are_close_to_batch_size(tmp_path):
    clock = Clock()
    batch_size = 256 * 1024
    sink = make_sink(tmp_path, clock, batch_size=batch_size)
    for batch in range(40):  # a trickle: 40 micro-batches of 250 rows
        sink.process(output_rows(250, start=batch * 250), batch)
    sink.close()
    assert table_rows(tmp_path, "outcomes") == 10_000
    assert sink.accumulator.destinations() == []
    sizes = data_files(tmp_path, "outcomes")
    assert len(sizes) < 40 // 4  # far fewer files than micro-batches


# -- exactly once ------------------------------------------------------------------------------------


class CrashingWriter(DeltaRsWriter):
    """Raises before or after the commit, once."""

    def __init__(self, root: str, when: str) -> None:
        super().__init__(root)
        self.when = when

    def commit_files(self, table, adds, **kw):
        if self.when == "before":
            self.when = None
            raise RuntimeError("driver died before the commit")
        super().commit_files(table, adds, **kw)
        if self.when == "after":
            self.when = None
            raise RuntimeError("driver died after the commit, before the clean-up")


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_around_the_commit_then_a_restart_gives_exactly_once(tmp_path, when):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=1)  # every batch is ready at once
    sink.process(output_rows(5), 0)
    sink.writer = CrashingWriter(str(tmp_path / "out"), when)
    with pytest.raises(RuntimeError):
        sink.process(output_rows(5, start=5), 1)
    # restart: a new sink over the same staging directory; Spark replays batch 1
    restarted = make_sink(tmp_path, clock, batch_size=1)
    restarted.process(output_rows(5, start=5), 1)
    restarted.process(output_rows(5, start=10), 2)
    restarted.close()
    ids = DeltaTable(str(tmp_path / "out" / "outcomes")).to_pyarrow_table().column("op_id").to_pylist()
    assert sorted(ids) == sorted(f"op-{i}" for i in range(15))


class Crash(Exception):
    pass


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_crash_at_each_fault_point_then_a_restart_gives_exactly_once(tmp_path, point):
    clock = Clock()
    passed: list[str] = []

    def hook(name: str) -> None:  # what tests/support/faulty_job.py does with kill -9
        passed.append(name)
        if name == point:
            raise Crash(name)

    params = {"batch_size": 1, "linger_ms": 60_000, "buffer_memory": 1 << 30}
    staging = str(tmp_path / "staging")
    acc = RecordAccumulator(staging, app_id="query-1", clock=clock, fault_hook=hook, **params)
    with pytest.raises(Crash):
        PurgatorySink(acc, DeltaRsWriter(str(tmp_path / "out"))).process(output_rows(5), 0)
    assert passed[-1] == point and set(passed) <= set(FAULT_POINTS)
    restarted = make_sink(tmp_path, clock, batch_size=1)  # same staging directory, no hook
    restarted.process(output_rows(5), 0)  # Spark replays the batch
    restarted.process(output_rows(5, start=5), 1)
    restarted.close()
    ids = DeltaTable(str(tmp_path / "out" / "outcomes")).to_pyarrow_table().column("op_id").to_pylist()
    assert sorted(ids) == sorted(f"op-{i}" for i in range(10))


def test_replaying_a_batch_adds_no_rows(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=1)
    sink.process(output_rows(4, n_unmatched=2, n_rejected=1), 0)
    sink.process(output_rows(4, n_unmatched=2, n_rejected=1), 0)  # the same micro-batch again
    fresh = make_sink(tmp_path, clock, batch_size=1)
    fresh.process(output_rows(4, n_unmatched=2, n_rejected=1), 0)  # and after a restart
    fresh.close()
    assert (
        table_rows(tmp_path, "outcomes"),
        table_rows(tmp_path, "unmatched_events"),
        table_rows(tmp_path, "rejected"),
    ) == (4, 2, 1)


def test_a_writer_keeping_its_tables_open_sees_another_writers_commits(tmp_path):
    """Tables stay open between drains (``writers.OpenTables``): a batch another writer
    committed meanwhile (a second run of the query, under the same app id) is not added again,
    and a pickled sink (Spark Connect's) opens them afresh."""
    import pickle

    clock = Clock()
    first, second = make_sink(tmp_path, clock, batch_size=1), make_sink(tmp_path, clock, batch_size=1)
    first.process(output_rows(3), 0)  # opens and keeps the tables
    second.process(output_rows(3), 0)  # recorded already: nothing added
    second.process(output_rows(2, start=10), 1)
    first.process(output_rows(2, start=10), 1)  # the other writer committed it: skipped
    again = pickle.loads(pickle.dumps(first.writer))
    assert again.committed_version("outcomes", "query-1") == 3  # 3 x batch 1, seen afresh
    first.process(output_rows(4, start=20), 2)
    first.close()
    ids = DeltaTable(str(tmp_path / "out" / "outcomes")).to_pyarrow_table().column("op_id").to_pylist()
    assert sorted(ids) == sorted([f"op-{i}" for i in (0, 1, 2, 10, 11, 20, 21, 22, 23)])


def test_a_partially_staged_batch_is_staged_afresh(tmp_path):
    clock = Clock()
    acc = RecordAccumulator(
        str(tmp_path / "staging"),
        app_id="q",
        batch_size=1 << 30,
        linger_ms=1 << 30,
        buffer_memory=1 << 40,
        clock=clock,
    )
    rows = pa.table({"op_id": ["a", "b"]})
    acc.append(3, "outcomes", "2026-01-01", rows)  # crash before mark_staged(3)
    clock.advance(10)
    acc.append(3, "outcomes", "2026-01-01", rows)  # the replay
    acc.mark_staged(3)
    assert [d.rows for d in acc.destinations()] == [2]


# -- tables and writers ------------------------------------------------------------------------------


def test_tables_read_back_with_the_spec_schemas_and_date_partitions(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=1)
    sink.process(output_rows(3, n_unmatched=2, n_rejected=2), 0)
    for name, partition in (
        ("outcomes", "resolved_date"),
        ("unmatched_events", "event_date"),
        ("rejected", "rejected_date"),
    ):
        schema = TABLES[name].schema
        table = DeltaTable(str(tmp_path / "out" / name))
        assert table.metadata().partition_columns == [partition]
        got = table.to_pyarrow_table()
        assert got.schema.names == schema.names or sorted(got.schema.names) == sorted(schema.names)
        for field in schema:
            assert got.schema.field(field.name).type == field.type, field.name
    outcomes = DeltaTable(str(tmp_path / "out" / "outcomes")).to_pyarrow_table().to_pylist()
    first = min(outcomes, key=lambda r: r["op_id"])
    assert first["latency_ms"] == 5 and first["batch_id"] == 0
    assert str(first["resolved_date"]) == "2026-01-01"


def test_app_transaction_version_is_recorded_per_query(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=1)
    sink.process(output_rows(2), 7)
    assert DeltaTable(str(tmp_path / "out" / "outcomes")).transaction_version("query-1") == 21  # 3 x 7


def test_every_commit_records_the_version_that_wrote_it(tmp_path):
    """The table's creation, its rows' commits and its compaction each record the package's
    version as the commit info's ``userMetadata``, read back through delta-rs's history."""
    sink = make_sink(tmp_path, Clock(), batch_size=1)
    for b in range(2):
        sink.process(output_rows(10, start=b * 10), b)
    maintain_tables(str(tmp_path / "out"))
    history = DeltaTable(str(tmp_path / "out" / "outcomes")).history()
    assert {c["operation"] for c in history} >= {"CREATE TABLE", "WRITE", "OPTIMIZE"}
    assert {c.get("userMetadata") for c in history} == {f"spark-purgatory/{spark_purgatory.__version__}"}


def test_maintenance_compacts_and_checkpoints(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=1)
    for b in range(5):
        sink.process(output_rows(10, start=b * 10), b)
    before = len(data_files(tmp_path, "outcomes"))
    report = maintain_tables(str(tmp_path / "out"))
    assert len(data_files(tmp_path, "outcomes")) < before
    assert "checkpoint_version" in report["outcomes"]
    assert table_rows(tmp_path, "outcomes") == 50


def test_native_delta_writer_is_chosen_only_when_its_classes_are_present():
    class Jvm:
        def __init__(self, present: bool) -> None:
            self.java = types.SimpleNamespace(lang=types.SimpleNamespace(Class=self))
            self.present = present

        def forName(self, name):  # noqa: N802 - the JVM's spelling
            if not self.present:
                raise RuntimeError(f"ClassNotFoundException: {name}")
            return name

    with_delta = types.SimpleNamespace(_jvm=Jvm(True))
    without = types.SimpleNamespace(_jvm=Jvm(False))
    assert delta_classes_available(with_delta) and not delta_classes_available(without)
    assert isinstance(choose_writer(with_delta, "/out"), SparkDeltaWriter)
    assert isinstance(choose_writer(without, "/out"), DeltaRsWriter)
    assert isinstance(choose_writer(with_delta, "/out", prefer="delta-rs"), DeltaRsWriter)
    # Spark Connect: no JVM handle; the session's extensions decide
    conf = {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension"}
    connect = types.SimpleNamespace(conf=types.SimpleNamespace(get=lambda k, d=None: conf.get(k, d)))
    assert delta_classes_available(connect)


def test_local_session_keeps_delta_rs_as_the_auto_writer(spark):
    # make jars put Delta's connector on the test session's class path (when mvn fetched it);
    # auto still writes with delta-rs there: only an environment's own Delta switches it
    assert delta_classes_available(spark) == bool(jar_paths("delta"))
    assert delta_added_locally(spark) == bool(jar_paths("delta"))
    assert isinstance(choose_writer(spark, "/out"), DeltaRsWriter)


def test_spark_writer_without_delta_classes_names_the_coordinates():
    classes = types.SimpleNamespace(forName=_class_not_found)
    jvm = types.SimpleNamespace(java=types.SimpleNamespace(lang=types.SimpleNamespace(Class=classes)))
    coordinates = r"io\.delta:delta-spark_2\.13:4\.4\.0"
    with pytest.raises(ConfigError, match=rf"^job.writer=spark: .* add {coordinates} ") as error:
        choose_writer(types.SimpleNamespace(_jvm=jvm), "/out", prefer="spark")
    assert "\n" not in str(error.value)


def _class_not_found(name):
    raise RuntimeError(f"ClassNotFoundException: {name}")


def test_outcome_rows_survive_the_split_with_their_values():
    tables = split_tables(
        output_rows(2, n_unmatched=1, n_rejected=1), 5, dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
    )
    o = tables["outcomes"].to_pylist()[0]
    assert o["op_id"] == "op-0" and o["keys"] == ["k0"] and o["batch_id"] == 5
    assert int(o["resolved_at"].timestamp() * 1000) == T0 + 5
    assert tables["rejected"].to_pylist()[0]["rejected_date"] == dt.date(2026, 1, 2)
    assert np.isnan(tables["unmatched_events"].to_pylist()[0]["value"] or np.nan)


# -- executors write, the driver commits ----------------------------------------------------------------


def incompressible(rows: pa.Table, seed: int = 0) -> pa.Table:
    """``rows`` with random payloads: Parquet cannot shrink them (file sizes are then real)."""
    payload = np.random.default_rng(seed).integers(0, 1 << 62, size=(rows.num_rows, 4)).astype(str)
    column = pa.array(["".join(p) for p in payload])
    return rows.set_column(rows.schema.get_field_index("payload"), "payload", column)


def test_data_files_are_close_to_batch_size_in_parquet_bytes(tmp_path):
    clock = Clock()
    batch_size = 1 << 20
    sink = make_sink(tmp_path, clock, batch_size=batch_size, buffer_memory=1 << 30)
    for batch in range(40):  # a trickle: ~0.14 MB of Parquet per micro-batch
        sink.process(incompressible(output_rows(1500, start=batch * 1500), seed=batch), batch)
    sink.close()
    sizes = sorted(data_files(tmp_path, "outcomes"), reverse=True)
    assert table_rows(tmp_path, "outcomes") == 60_000
    full = [s for s in sizes if s >= batch_size * 0.8]
    assert len(full) >= 4 and all(s <= batch_size * 1.25 for s in sizes), sizes
    assert len(sizes) - len(full) <= 1, sizes  # only what close() flushes is smaller


def test_committed_files_carry_delta_statistics(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=1)
    sink.process(output_rows(10, n_unmatched=2), 0)
    table = DeltaTable(str(tmp_path / "out" / "outcomes"))
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert [a["num_records"] for a in adds] == [10]
    assert adds[0]["min.op_id"] == "op-0" and adds[0]["max.op_id"] == "op-9"
    assert adds[0]["null_count.status"] == 0 and adds[0]["partition.resolved_date"] is not None
    picked = table.to_pyarrow_table(filters=[("resolved_date", "=", dt.date(2026, 1, 1))])
    assert picked.num_rows == 10


def test_staged_and_data_files_dictionary_encode_only_columns_of_few_values(tmp_path):
    """``sender.dictionary_columns``: status and the like with a dictionary, op ids and
    payloads plain, in the staged files and in the data files they become."""
    import pyarrow.parquet as pq

    def encodings(path) -> dict[str, set[str]]:
        group = pq.ParquetFile(path).metadata.row_group(0)
        columns = (group.column(i) for i in range(group.num_columns))
        return {c.path_in_schema: set(c.encodings) for c in columns}

    clock = Clock()
    sink = make_sink(tmp_path, clock)  # batch.size not reached: the rows stay staged
    sink.process(output_rows(50), 0)
    staged = [f for d in sink.accumulator.destinations() if d.table == "outcomes" for f in d.files]
    found = [encodings(tmp_path / "staging" / f) for f in staged]
    sink.close()  # and now into data files
    found += [encodings(p) for p in (tmp_path / "out" / "outcomes").rglob("*.parquet")]
    assert len(found) >= 2
    for file in found:
        assert "RLE_DICTIONARY" in file["status"] and "RLE_DICTIONARY" in file["condition"], file
        assert not {"RLE_DICTIONARY", "PLAIN_DICTIONARY"} & (file["op_id"] | file["payload"]), file


def test_a_failed_task_attempts_file_is_deleted_when_the_batch_is_recorded(tmp_path):
    from spark_purgatory.delta.staging import stage_rows, staged_name

    clock = Clock()
    acc = make_sink(tmp_path, clock).accumulator
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    common = {"now": now, "staging_dir": acc.staging_dir, "storage": acc.storage, "write": True}
    staged = stage_rows(output_rows(3), batch_id=0, **common)
    # an attempt of task 7 that failed after writing its file: the driver never hears of it
    lost = stage_rows(output_rows(5), batch_id=0, **common)
    lost_name = staged_name("outcomes", "2026-01-01", 0, 7)
    (tmp_path / "staging" / lost_name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "staging" / staged_name("outcomes", "2026-01-01", 0, 0)).rename(
        tmp_path / "staging" / lost_name
    )
    assert lost.num_rows and (tmp_path / "staging" / lost_name).exists()
    stage_rows(output_rows(3), batch_id=0, **common)  # the successful attempt of task 0
    acc.record(0, staged)
    assert [d.rows for d in acc.destinations()] == [3]
    assert not (tmp_path / "staging" / lost_name).exists()


def test_a_replayed_batch_stages_nothing_but_is_still_counted(tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=1)
    first = sink.process(output_rows(4, n_rejected=1), 0)  # staged, committed, staged files deleted
    again = sink.process(output_rows(4, n_rejected=1), 0)  # Spark replays it
    assert list((tmp_path / "staging").rglob("*.parquet")) == []
    assert (again["completed"], again["rejected"]) == (first["completed"], first["rejected"]) == (4, 1)
    assert table_rows(tmp_path, "outcomes") == 4


def test_every_table_exists_from_the_start_with_its_schema(tmp_path):
    writer = DeltaRsWriter(str(tmp_path / "out"))
    writer.create_tables()
    writer.create_tables()  # idempotent
    for name, contract in TABLES.items():
        table = DeltaTable(str(tmp_path / "out" / name))
        assert table.metadata().partition_columns == [contract.partition_by]
        read = table.to_pyarrow_table()
        assert read.schema == contract.schema, name  # every column, in order, of its type
        assert read.num_rows == 0 and table.version() == 0


def test_an_outcomes_table_of_the_older_contract_gains_who_answered_with_its_old_rows_null(tmp_path):
    """A table made before ``reported`` and ``missing``: the start adds them (nullable, at the
    end), its rows read null there, and the next rows fill them (docs/upgrading.md)."""
    older = pa.schema([f for f in TABLES["outcomes"].schema if f.name not in ("reported", "missing")])
    now = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
    old_row = split_tables(output_rows(1), 0, now)["outcomes"].select(older.names)
    write_deltalake(str(tmp_path / "out" / "outcomes"), old_row, partition_by=["resolved_date"])
    sink = make_sink(tmp_path, Clock(), linger_ms=0)
    sink.writer.create_tables()  # as ``start`` does
    rows = output_rows(1, start=1)
    answered = {"reported": pa.array([["bo"], None], pa.list_(pa.string()))}
    answered["missing"] = pa.array([["ana", "chen"], None], pa.list_(pa.string()))
    for name, values in answered.items():
        rows = rows.set_column(rows.schema.get_field_index(name), name, values)
    sink.process(rows, 1)
    table = DeltaTable(str(tmp_path / "out" / "outcomes"))
    assert table.schema().to_arrow().names == [*older.names, "reported", "missing"]
    read = {r["op_id"]: r for r in table.to_pyarrow_table().to_pylist()}
    assert (read["op-0"]["reported"], read["op-0"]["missing"]) == (None, None)
    assert (read["op-1"]["reported"], read["op-1"]["missing"]) == (["bo"], ["ana", "chen"])


def test_a_writer_of_rows_gets_the_staged_rows(tmp_path):
    class RowWriter:  # a user's own TableWriter: committed_version and commit only
        def __init__(self) -> None:
            self.commits: dict[str, list] = {}

        def committed_version(self, table, app_id):
            return (
                max(self.commits.get(table, [(None, -1)]), key=lambda c: c[1])[1]
                if table in self.commits
                else None
            )

        def commit(self, table, rows, *, app_id, version, target_file_size):
            self.commits.setdefault(table, []).append((rows, version))

    clock = Clock()
    acc = RecordAccumulator(
        str(tmp_path / "staging"), app_id="q", batch_size=1, linger_ms=1, buffer_memory=1 << 20, clock=clock
    )
    writer = RowWriter()
    PurgatorySink(acc, writer).process(output_rows(3, n_unmatched=1), 0)
    rows, version = writer.commits["outcomes"][0]
    assert sorted(rows.column("op_id").to_pylist()) == ["op-0", "op-1", "op-2"] and version == 0
    assert rows.schema == TABLES["outcomes"].schema


def test_the_spark_delta_writer_reads_the_staged_files_with_the_app_transaction(tmp_path):
    calls: list[tuple] = []

    class Chain:  # records Spark's reader/writer calls
        def __getattr__(self, name):
            def call(*args):
                calls.append((name, *args))
                return self

            return call

        @property
        def read(self):
            return self

        @property
        def write(self):
            return self

    clock = Clock()
    acc = RecordAccumulator(
        str(tmp_path / "staging"), app_id="q", batch_size=1, linger_ms=1, buffer_memory=1 << 20, clock=clock
    )
    PurgatorySink(acc, SparkDeltaWriter(Chain(), str(tmp_path / "out"))).process(output_rows(3), 0)
    read = [c for c in calls if c[0] == "parquet"][0]
    assert all(p.startswith(str(tmp_path / "staging")) and p.endswith(".parquet") for p in read[1:])
    assert ("option", "txnAppId", "q") in calls and ("option", "txnVersion", 0) in calls
    assert ("option", "userMetadata", f"spark-purgatory/{spark_purgatory.__version__}") in calls
    assert ("save", str(tmp_path / "out" / "outcomes")) in calls


@pytest.mark.spark
def test_the_sink_stages_on_the_executors_and_commits_the_files_they_wrote(spark, tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=1 << 30)
    batch = spark.createDataFrame(output_rows(40, n_unmatched=3, n_rejected=2)).repartition(2)
    sink(batch, 0)
    staged = (tmp_path / "staging" / "_staged" / f"{0:020d}.json").read_text()
    assert "-00000.parquet" in staged and "-00001.parquet" in staged  # one file per task and table
    assert [d.rows for d in sink.accumulator.destinations() if d.table == "outcomes"] == [40]
    sink.close()  # the sender's job: one task per destination
    assert (table_rows(tmp_path, "outcomes"), table_rows(tmp_path, "unmatched_events")) == (40, 3)
    assert table_rows(tmp_path, "rejected") == 2
    sink(batch, 0)  # a replay adds nothing
    sink.close()
    assert table_rows(tmp_path, "outcomes") == 40


@pytest.mark.spark
def test_a_quiet_stream_commits_lingered_rows_through_the_senders_job(spark, tmp_path):
    clock = Clock()
    sink = make_sink(tmp_path, clock, linger_ms=1_000)
    sink(spark.createDataFrame(output_rows(7)).repartition(2), 0)
    assert sink.drain_lingering() == [] and table_rows(tmp_path, "outcomes") == 0
    clock.advance(1_000)  # no micro-batch: the linger timer drains
    committed = sink.drain_lingering()
    assert [(c["table"], c["reasons"], c["files"]) for c in committed] == [
        ("metrics", ["lingered"], 1),
        ("outcomes", ["lingered"], 1),
    ]
    assert (table_rows(tmp_path, "outcomes"), table_rows(tmp_path, "metrics")) == (7, 1)


# -- the shards' own staging (start's path) ------------------------------------------------------------


def shard_staged(acc: RecordAccumulator, monkeypatch, batch_id: int, rows: pa.Table) -> pa.Table:
    """What one shard call of micro-batch ``batch_id`` stages and returns (``ShardStaging``)."""
    from spark_purgatory.delta import staging

    monkeypatch.setattr(staging, "micro_batch_id", lambda: batch_id)  # Spark's local property
    return staging.ShardStaging(acc.staging_dir, acc.storage)(rows, 0)


def test_a_replayed_batch_the_shards_stage_again_is_committed_once(tmp_path, monkeypatch):
    """A replay's shards write their files again under names of their own: no manifest names
    them, so even a batch drained in part (its outcomes committed, its unmatched event still
    staged) gets no row twice; the next batch's record sweeps the replay's files."""
    clock = Clock()
    sink = make_sink(tmp_path, clock, batch_size=1_500)  # 40 outcomes fill it, 1 unmatched does not
    acc, writer = sink.accumulator, sink.writer
    first = output_rows(40, n_unmatched=1)
    acc.record(0, shard_staged(acc, monkeypatch, 0, first))
    assert [c["table"] for c in acc.drain(0, writer)] == ["outcomes"]
    replay = shard_staged(acc, monkeypatch, 0, first)  # Spark replays micro-batch 0 after a crash
    acc.record(0, replay)
    assert acc.drain(0, writer) == []
    acc.record(1, shard_staged(acc, monkeypatch, 1, output_rows(40, start=100, n_unmatched=1)))
    replayed = {n.rsplit("/", 1)[-1] for n in replay.column("name").drop_null().to_pylist()}
    assert not replayed & {p.name for p in (tmp_path / "staging").rglob("*.parquet")}
    sink.close()
    assert (table_rows(tmp_path, "outcomes"), table_rows(tmp_path, "unmatched_events")) == (80, 2)


def test_staging_in_the_shard_step_needs_a_micro_batch():
    from spark_purgatory.delta.staging import ShardStaging

    with pytest.raises(RuntimeError, match="streaming.sql.batchId"):
        ShardStaging("/tmp/nowhere", None)(output_rows(1), 0)  # type: ignore[arg-type]
