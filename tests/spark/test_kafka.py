"""Operations and events from Kafka topics: a real broker on loopback, Spark's Kafka source.

The broker is the worker's one ``kafka_broker`` (``spark_purgatory.kafka_broker``, KRaft, from
the pinned JARs); every test makes topics of its own on it.  Each test is a real query:

* the contract's scenarios (a generated workload with malformed lines, and cancels by op_id,
  by key and after a deadline) through two topics of three partitions give the outcomes,
  unmatched events and rejections that the same lines give as files, the withdrawn
  operations ``cancelled`` as the engine decides them; a rejected record's ``raw`` names its
  topic, partition and offset, where Spark's Kafka source finds that exact record again;
* partitions skewed in event time (one a time slice behind the other) and one topic behind
  the other: the watermark never passes the slower input, nothing valid is rejected as
  late, and a record further behind than the delay lands in ``rejected`` as ``late``;
* ``available-now`` reads a key-partitioned backlog to the offsets it found at its start, in
  several micro-batches of ``maxOffsetsPerTrigger`` (partitions read far apart in event time,
  the watermark the slowest one's), and stops; a restart resumes from the checkpoint's
  offsets, and ``end_of_input`` then resolves every operation exactly once;
* a topic that does not exist (or was deleted) and a broker that does not answer stop the
  job at start with one line (Spark's own source would fail later naming no topic, or
  retry for minutes);
* a quiet stream (``test_quiet_stream.py``'s) through topics: with both silent, expiries come
  on the clock within the documented bound.  Here for this file's broker: a file of its own
  for it started a broker for one test.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.engine.purgatory import Purgatory
from spark_purgatory.job import main as job_main
from spark_purgatory.spark.formats import read_stream
from spark_purgatory.workload import generate, generate_confirmations, write_json_lines
from tests.spark.test_quiet_stream import (
    TIMEOUT_MS,
    TRIGGER_S,
    _bound_s,
    _config,
    _iso,
    _lags,
    _now_ms,
    _rows,
    _seen,
    _waiting_for_data,
)

pytestmark = [pytest.mark.spark, pytest.mark.jars("kafka", "kafka-broker")]


def _lines(directory: str) -> list[bytes]:
    """Every line of a directory's files, in file order (write_json_lines names them so)."""
    out: list[bytes] = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out += f.read().splitlines()
    return out


def _table(path: str) -> pd.DataFrame:
    return DeltaTable(path).to_pandas()


_COLUMNS = ("op_id", "status", "resolved_at", "matched_events")


def _warned(frame: pd.DataFrame) -> set[tuple]:
    """Warnings as (op_id, warned_at in ms, progress; None where there is none)."""
    return {
        (
            r.op_id,
            pd.Timestamp(r.warned_at).value // 1_000_000,
            None if pd.isna(r.progress) else round(r.progress, 6),
        )
        for r in frame.itertuples()
    }


def _outcomes(frame: pd.DataFrame) -> set[tuple]:
    return {
        (r.op_id, r.status, pd.Timestamp(r.resolved_at).value // 1_000_000, r.matched_events)
        for r in frame.itertuples()
    }


def _options(broker, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap_servers, "startingOffsets": "earliest", **extra}


# -- the contract through Kafka, as through files --------------------------------------------------

#: records only Kafka can carry, or poison, produced beside the workload: a tombstone (a null
#: value) and a value nested 100,000 deep (operations), invalid UTF-8 (events); each rejected
KAFKA_POISON = (
    [None, b'{"op_id": "deep", "payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"],
    [b'{"key": "\xff\xfe", "ts": "x"}'],
)


def _with_cancels(work):
    """The workload with cancel events: every 40th operation withdrawn by its op_id half a
    second after it starts (the first again at its deadline: too late), and every 40th
    (another) by its first key, withdrawing whatever is pending there."""
    ops = work.operations
    by_id, by_key = ops.iloc[5::40], ops.iloc[25::40]
    late = by_id.iloc[:1]
    cancels = pd.DataFrame(
        {
            "key": [keys[0] for keys in pd.concat([by_id, by_key, late])["keys"]],
            "ts": np.concatenate([by_id["ts"] + 500, by_key["ts"] + 700, late["ts"] + late["timeout_ms"]]),
            "op_id": [*by_id["op_id"], *[None] * len(by_key), *late["op_id"]],
            "cancel": True,
        }
    )
    events = pd.concat([work.events, cancels], ignore_index=True)
    return dataclasses.replace(work, events=events.sort_values("ts", kind="stable", ignore_index=True))


@pytest.fixture(scope="module")
def through_both(spark, kafka_broker, tmp_path_factory):
    """One workload with malformed lines, cancels and warnings asked, run as files and as topics
    of three partitions."""
    root = tmp_path_factory.mktemp("kafka-contract")
    work = _with_cancels(generate(400, seed=7, ops_per_second=40, multi_key=0.05, warned=0.3))
    write_json_lines(work, f"{root}/in/ops", f"{root}/in/events", files=4, malformed=8, seed=2)
    config = PurgatoryConfig(shards=2, watermark_delay="5 seconds")
    runs = {}
    for name in ("files", "kafka"):
        given = (f"{root}/in/ops", f"{root}/in/events")
        options = None
        if name == "kafka":
            given = tuple(
                kafka_broker.create_topic(f"contract-{kind}", partitions=3) for kind in ("ops", "events")
            )
            for topic, directory in zip(given, (f"{root}/in/ops", f"{root}/in/events"), strict=True):
                lines = _lines(directory)
                kafka_broker.produce(topic, lines, partitions=[i % 3 for i in range(len(lines))])
            for topic, values in zip(given, KAFKA_POISON, strict=True):  # Kafka's alone: not in files
                kafka_broker.produce(topic, values, partitions=0)
            options = _options(kafka_broker)
        out = f"{root}/{name}/out"
        with start(
            *given,
            output=out,
            checkpoint=f"{root}/{name}/chk",
            config=config,
            source_format="kafka" if name == "kafka" else "json",
            kafka_options=options,
            end_of_input=True,
            spark=spark,
        ) as q:
            q.await_termination()
        runs[name] = {
            t: _table(f"{out}/{t}") for t in ("outcomes", "unmatched_events", "rejected", "warnings")
        }
    return work, runs


def test_the_contract_through_kafka_gives_what_files_give(through_both):
    work, runs = through_both
    files, kafka = runs["files"], runs["kafka"]
    assert len(kafka["outcomes"]) == len(work.operations) and kafka["outcomes"]["op_id"].is_unique
    assert _outcomes(kafka["outcomes"]) == _outcomes(files["outcomes"])
    unmatched = [
        sorted(t["unmatched_events"][["key", "ts", "reason"]].itertuples(index=False, name=None))
        for t in (files, kafka)
    ]
    assert unmatched[0] == unmatched[1]
    assert "cancel_no_operation" in {r[-1] for r in unmatched[1]}  # the cancel at a deadline
    # withdrawn as the engine withdraws them, the input in one micro-batch
    replayed = Purgatory().replay(work.operations, work.events, final_watermark_ms=2**62)
    engine = replayed.outcomes
    cancelled = {o for o in _outcomes(kafka["outcomes"]) if o[1] == "cancelled"}
    assert len(cancelled) > 20
    assert cancelled == {tuple(r) for r in engine.loc[engine["status"] == "cancelled", list(_COLUMNS)].values}
    # warned once each, at the same times and progress, as the engine warns them
    warned = [_warned(t["warnings"]) for t in (files, kafka)]
    assert len(kafka["warnings"]) == len(warned[1]) > 20 and warned[0] == warned[1]
    assert warned[1] == _warned(
        replayed.warnings.assign(warned_at=pd.to_datetime(replayed.warnings["warned_at"], unit="ms"))
    )
    # the same malformed lines rejected for the same reasons; Kafka's raw wraps the line
    as_files = sorted(files["rejected"][["source", "reason", "raw"]].itertuples(index=False, name=None))
    as_kafka = sorted(
        (r.source, r.reason, json.loads(r.raw)["value"])
        for r in kafka["rejected"].itertuples()
        if not _kafka_poison(json.loads(r.raw).get("value"))
    )
    assert len(as_files) == 8 and as_kafka == as_files


def test_a_tombstone_a_deep_value_and_invalid_utf8_are_rejected_never_fatal(through_both):
    _work, runs = through_both
    rejected = runs["kafka"]["rejected"]
    found = sorted(
        (r.source, r.reason, (json.loads(r.raw).get("value") or "")[:16])  # a tombstone's raw: no value
        for r in rejected.itertuples()
        if _kafka_poison(json.loads(r.raw).get("value"))
    )
    assert found == [
        ("events", "bad_ts", '{"key": "\ufffd\ufffd", "ts": "x"}'[:16]),  # its key read with U+FFFD
        ("operations", "malformed_json", ""),  # the tombstone: no value at all
        ("operations", "too_deep", '{"op_id": "deep"'),
    ]


def _kafka_poison(value: str | None) -> bool:
    return value is None or value.startswith(('{"op_id": "deep"', '{"key": "\ufffd'))


def test_a_rejected_record_names_its_topic_partition_and_offset(spark, kafka_broker, through_both):
    _work, runs = through_both
    records = [(row.source, json.loads(row.raw)) for row in runs["kafka"]["rejected"].itertuples()]
    # the poison records are the test above's; the others are the malformed lines files give too
    named = [(source, record) for source, record in records if not _kafka_poison(record.get("value"))]
    assert len(named) == 8
    for source, record in named:
        assert record["topic"] == f"contract-{'ops' if source == 'operations' else 'events'}"
    # Spark's Kafka source reads each record back from where its row says it is: one read of
    # the named partitions, from the first named offset to the last, keyed by where it found them
    spans: dict[str, dict[str, list[int]]] = {}
    for _source, record in named:
        span = spans.setdefault(record["topic"], {}).setdefault(str(record["partition"]), [])
        span.append(record["offset"])
    read = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .option("assign", json.dumps({t: [int(p) for p in parts] for t, parts in spans.items()}))
        .option(
            "startingOffsets",
            json.dumps({t: {p: min(o) for p, o in parts.items()} for t, parts in spans.items()}),
        )
        .option(
            "endingOffsets",
            json.dumps({t: {p: max(o) + 1 for p, o in parts.items()} for t, parts in spans.items()}),
        )
        .load()
        .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
        .collect()
    )
    found = {(r.topic, r.partition, r.offset): r.value for r in read}
    for _source, record in named:
        assert found[(record["topic"], record["partition"], record["offset"])] == record["value"], record


# -- partitions and topics skewed in event time ---------------------------------------------------


def test_skewed_partitions_and_topics_the_watermark_follows_the_slower_input(spark, kafka_broker, tmp_path):
    """Partition 1 of each topic runs one 5-second slice behind partition 0, and the events
    topic one slice behind the operations; with a 12-second delay no valid row is late."""
    work = generate_confirmations(150, timeout_ms=20_000, ops_per_second=15, seed=4)
    ops, events = work.operations, work.events
    start_ms = int(ops["ts"].min())
    delay_ms, slice_ms = 12_000, 5_000
    topics = {kind: kafka_broker.create_topic(f"skew-{kind}", partitions=2) for kind in ("ops", "events")}
    lines = {
        "ops": [
            json.dumps({"op_id": r.op_id, "key": r.keys[0], "ts": int(r.ts), "timeout_ms": 20_000})
            for r in ops.itertuples()
        ],
        "events": [json.dumps({"key": r.key, "ts": int(r.ts)}) for r in events.itertuples()],
    }
    frames = {"ops": ops, "events": events}
    # which slice and partition each record belongs to; a topic's partition 1 lags one slice,
    # and the events topic lags one more
    placed = {}
    for kind, frame in frames.items():
        part = frame.index.to_numpy() % 2
        slices = (frame["ts"].to_numpy() - start_ms) // slice_ms + part + (kind == "events")
        placed[kind] = (part, slices)
    config = PurgatoryConfig(shards=2, watermark_delay=f"{delay_ms // 1000} seconds")
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    slowest = []  # after each round, the smaller of the two inputs' largest event times
    rounds = int(max(placed["events"][1].max(), placed["ops"][1].max())) + 1
    with start(
        topics["ops"],
        topics["events"],
        output=out,
        checkpoint=chk,
        config=config,
        trigger="processing-time=1s",
        source_format="kafka",
        kafka_options=_options(kafka_broker),
        spark=spark,
    ) as q:
        seen = {"ops": start_ms, "events": start_ms}
        for r in range(rounds):
            for kind in ("ops", "events"):
                part, slices = placed[kind]
                for p in (0, 1):
                    chosen = [i for i in range(len(part)) if part[i] == p and slices[i] == r]
                    kafka_broker.produce(topics[kind], [lines[kind][i] for i in chosen], partitions=p)
                    if chosen:
                        seen[kind] = max(seen[kind], int(frames[kind]["ts"].to_numpy()[chosen].max()))
            slowest.append(min(seen.values()))
            q.process_all_available()
        # one event further behind the slower input's watermark than anything valid: late
        late_ts = min(seen.values()) - delay_ms - 60_000
        kafka_broker.produce(
            topics["events"], [json.dumps({"key": "straggler", "ts": late_ts})], partitions=1
        )
        q.process_all_available()
        q.end_input()
    metrics = _table(f"{out}/metrics")
    running = metrics[metrics["watermark"].notna()]
    from spark_purgatory.handoff.wake import is_end_watermark

    wm = [
        int(pd.Timestamp(t).value // 1_000_000)
        for t in running["watermark"]
        if not is_end_watermark(int(pd.Timestamp(t).value // 1_000_000))
    ]
    assert max(wm) <= slowest[-1] - delay_ms, "the watermark passed the slower input's"
    assert max(wm) >= slowest[-2] - delay_ms, "the watermark did not follow the slower input"
    rejected = _table(f"{out}/rejected")
    # decided in the shard, where the record's coordinates no longer travel: its fields tell it
    assert list(zip(rejected["reason"], rejected["key"], strict=True)) == [("late", "straggler")]
    expected = Purgatory(config).replay(ops, events, final_watermark_ms=2**62).outcomes
    got = _table(f"{out}/outcomes")
    assert {
        (r.op_id, r.status, pd.Timestamp(r.resolved_at).value // 1_000_000) for r in got.itertuples()
    } == {(r.op_id, r.status, int(r.resolved_at)) for r in expected.itertuples()}


# -- available-now, restart, end of input -----------------------------------------------------------


def _offsets_log(checkpoint: str, topics: set[str]) -> list[dict[str, dict[str, int]]]:
    """The Kafka offsets of each micro-batch in the checkpoint, in order (Spark's offset log:
    a version line, the batch's metadata, then one line per source)."""
    log = os.path.join(checkpoint, "offsets")
    batches = []
    for batch in sorted(int(n) for n in os.listdir(log) if n.isdigit()):
        with open(os.path.join(log, str(batch))) as f:
            sources = [json.loads(line) for line in f.read().splitlines()[2:] if line.startswith("{")]
        batches.append({t: parts for source in sources for t, parts in source.items() if t in topics})
    return batches


def test_a_key_partitioned_backlog_drained_available_now_in_small_micro_batches_then_resumed(
    spark, kafka_broker, tmp_path
):
    """Four partitions by key, two dense early and sparse late, two the other way round:
    ``maxOffsetsPerTrigger`` takes the same share of each partition's backlog per micro-batch,
    so the partitions are read far apart in event time (more than the delay).  The watermark
    follows the slowest partition (``handoff.partitions``): nothing valid is ``late``.

    ``available-now`` reads the first half of each partition's backlog, up to the offsets it
    found at its start, in several micro-batches, and stops; the rest is produced (with a
    malformed record on each topic) and a restart resumes from the checkpoint's offsets, with
    ``end_of_input``: every operation resolves exactly once, and the outcomes and unmatched
    events are the reference's for the whole input."""
    work = generate_confirmations(600, timeout_ms=20_000, ops_per_second=3, seed=9)
    ops, events = work.operations.copy(), work.events.copy()
    start_ms, span_ms = int(ops["ts"].min()), 200_000
    part = {op_id: i % 4 for i, op_id in enumerate(ops["op_id"])}
    u = (ops["ts"].to_numpy() - start_ms) / (ops["ts"].max() - start_ms)
    early = ops["op_id"].map(part).to_numpy() < 2  # partitions 0, 1: dense early; 2, 3: dense late
    warped = start_ms + (span_ms * (u**2 * early + u**0.5 * ~early)).astype("int64")
    shift = dict(zip(ops["op_id"], warped - ops["ts"].to_numpy(), strict=True))
    ops["ts"] = warped
    events["ts"] = events["ts"].to_numpy() + events["key"].map(shift).to_numpy()
    topics = {kind: kafka_broker.create_topic(f"backlog-{kind}", partitions=4) for kind in ("ops", "events")}
    halves = {}  # each topic's records by partition in event-time order, cut in two halves
    for kind, frame, key in (("ops", ops, "op_id"), ("events", events, "key")):
        frame = frame.sort_values("ts", kind="stable")
        lines = [
            json.dumps({"op_id": r.op_id, "key": r.keys[0], "ts": int(r.ts), "timeout_ms": 20_000})
            if kind == "ops"
            else json.dumps({"key": r.key, "ts": int(r.ts)})
            for r in frame.itertuples()
        ]
        by_part = [[ln for ln, k in zip(lines, frame[key], strict=True) if part[k] == p] for p in range(4)]
        halves[kind] = [[b[: len(b) // 2] for b in by_part], [b[len(b) // 2 :] for b in by_part]]
    halves["ops"][1][0].append("{not json")  # malformed, one on each topic: rejected, never late
    halves["events"][1][0].append("{not json")
    produced = {t: dict.fromkeys(map(str, range(4)), 0) for t in topics.values()}

    def produce(half: int) -> None:
        for kind, topic in topics.items():
            for p, lines in enumerate(halves[kind][half]):
                kafka_broker.produce(topic, lines, partitions=p)
                produced[topic][str(p)] += len(lines)

    config = PurgatoryConfig(shards=2, watermark_delay="10 seconds")
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")

    def run(**options) -> object:
        with start(
            topics["ops"],
            topics["events"],
            output=out,
            checkpoint=chk,
            config=config,
            source_format="kafka",
            kafka_options=_options(kafka_broker, maxOffsetsPerTrigger="100"),
            spark=spark,
            **options,
        ) as q:
            q.await_termination()
        return q

    produce(0)
    first = run()
    assert not first.is_active
    read = _offsets_log(chk, set(topics.values()))
    assert read[-1] == produced, "it read up to what it found"
    # maxOffsetsPerTrigger, 100 records of a topic's 300: three micro-batches of it (the log
    # repeats an offset for a micro-batch without new input)
    assert len({json.dumps(r, sort_keys=True) for r in read}) >= 3, "the backlog was read in one go"
    produce(1)
    second = run(end_of_input=True)
    assert _offsets_log(chk, set(topics.values()))[-1] == produced
    assert second.pending == 0
    rejected = _table(f"{out}/rejected")
    assert sorted(rejected["reason"]) == ["malformed_json", "malformed_json"], "a valid row was judged late"
    outcomes = _table(f"{out}/outcomes")
    # resumed where the first run stopped: a record read twice would be a duplicate_op_id
    assert outcomes["op_id"].is_unique and len(outcomes) == len(ops)
    metrics = _table(f"{out}/metrics")
    assert int(metrics["input_operations"].sum()) == sum(produced[topics["ops"]].values())
    assert int(metrics["input_events"].sum()) == sum(produced[topics["events"]].values())
    expected = Purgatory(config).replay(ops, events, final_watermark_ms=2**62)
    assert {
        (r.op_id, r.status, pd.Timestamp(r.resolved_at).value // 1_000_000) for r in outcomes.itertuples()
    } == {(r.op_id, r.status, int(r.resolved_at)) for r in expected.outcomes.itertuples()}
    unmatched = _table(f"{out}/unmatched_events")
    assert sorted(unmatched["key"]) == sorted(expected.unmatched["key"])


# -- a topic that is not there, a broker that does not answer ---------------------------------------


def test_a_missing_topic_or_an_unreachable_broker_stops_the_job_with_one_line(
    spark, kafka_broker, tmp_path, capsys
):
    from spark_purgatory.kafka_broker import free_port

    kafka_broker.create_topic("gone-ops")
    kafka_broker.create_topic("gone-events")
    kafka_broker.delete_topic("gone-events")

    def job(servers: str, *extra: str) -> tuple[int, list[str]]:
        code = job_main(
            [
                *("--ops-path", "gone-ops", "--events-path", "gone-events", "--source-format", "kafka"),
                *("--output-path", str(tmp_path / "out"), "--checkpoint-path", str(tmp_path / "chk")),
                *("--set", f"kafka.bootstrap.servers={servers}", *extra),
            ]
        )
        return code, capsys.readouterr().err.strip().splitlines()

    code, err = job(kafka_broker.bootstrap_servers)
    assert code == 2 and len(err) == 1, err
    assert "'gone-events' does not exist" in err[0] and "'gone-ops'" not in err[0]
    nobody = f"127.0.0.1:{free_port()}"
    code, err = job(nobody, "--set", "kafka.default.api.timeout.ms=3000")
    assert code == 2 and len(err) == 1, err
    assert f"Kafka at {nobody} did not answer within 3 s" in err[0]


def test_the_kafka_source_holds_no_fetch_past_its_data_unless_told(spark, kafka_broker):
    """``kafka.fetch.max.wait.ms`` (``KAFKA_DEFAULTS``) reaches Spark's Kafka source: a pooled
    consumer's fetch parked at a partition's end would hold the next micro-batch's task; a
    value the user gives wins."""
    topic = kafka_broker.create_topic("fetch-wait")
    servers = {"kafka.bootstrap.servers": kafka_broker.bootstrap_servers}

    def fetch_wait(given: dict) -> str:
        plan = read_stream(spark, topic, "kafka", kafka_options=given)._jdf.queryExecution().analyzed()
        return plan.collectLeaves().apply(0).extraOptions().get("kafka.fetch.max.wait.ms")

    assert fetch_wait(servers) == "10"
    assert fetch_wait({**servers, "kafka.fetch.max.wait.ms": "200"}) == "200"


def test_a_topic_deleted_mid_run_ends_the_job_in_one_line_a_start_once_restored_continues_exactly_once(
    spark, kafka_broker, tmp_path, capsys
):
    """The events topic is deleted once the job has committed a micro-batch: the job ends with
    one line naming the topic, without restarts (each would meet the same answer).  Restored
    (created again with its records, at the same offsets, as from a mirror), a start continues
    from the checkpoint's offsets: the tables then hold what the engine computes."""
    from tests.support.clean_stops import after_a_commit
    from tests.support.crash_harness import SETTINGS, check, job_options, tables_and_reference

    work = generate(300, seed=23, ops_per_second=40)
    malformed = 2
    write_json_lines(work, f"{tmp_path}/in/ops", f"{tmp_path}/in/events", files=1, malformed=malformed)
    lines = {kind: _lines(f"{tmp_path}/in/{kind}") for kind in ("ops", "events")}
    topics = {kind: kafka_broker.create_topic(f"deleted-{kind}") for kind in lines}
    for kind, topic in topics.items():
        kafka_broker.produce(topic, lines[kind])
    settings = {
        **SETTINGS,
        "kafka.bootstrap.servers": kafka_broker.bootstrap_servers,
        "source.kafka.startingOffsets": "earliest",
        "source.kafka.maxOffsetsPerTrigger": "150",  # several micro-batches: deleted mid-way
        "job.restart.backoff.ms": "100",
    }
    chk, out = str(tmp_path / "chk"), str(tmp_path / "out")
    args = [
        *("--ops-path", topics["ops"], "--events-path", topics["events"], "--source-format", "kafka"),
        *("--output-path", out, "--checkpoint-path", chk, *job_options(settings)),
    ]

    with after_a_commit(chk, lambda: kafka_broker.delete_topic(topics["events"])):
        code = job_main([*args, "--trigger", "processing-time=1s"])
    failed = capsys.readouterr()
    lines_err = failed.err.strip().splitlines()
    assert code == 1 and len(lines_err) == 1, failed.err[-3000:]
    assert lines_err[0].startswith(
        f"error: the Kafka topic 'deleted-events' is gone from {kafka_broker.bootstrap_servers}"
    ), lines_err
    assert "restart 1 of" not in failed.out

    kafka_broker.create_topic(topics["events"])  # restored with its records
    kafka_broker.produce(topics["events"], lines["events"])
    assert job_main([*args, "--trigger", "available-now"]) == 0, capsys.readouterr().err[-3000:]
    check(tables_and_reference(work, out, None, settings, malformed))


# -- a quiet stream: expiries on the clock -----------------------------------------------------


def test_a_quiet_kafka_stream_expires_on_the_clock(spark, kafka_broker, tmp_path):
    """``test_quiet_stream.py``'s quiet stream through topics of two partitions: with
    ``watermark.idle.timeout`` set and both topics silent, the operations nothing completed
    expire within the documented bound after their deadlines pass on the clock."""
    topics = [kafka_broker.create_topic(f"quiet-{kind}", partitions=2) for kind in ("ops", "events")]
    out = str(tmp_path / "out")

    def produce(topic: str, rows: list[dict]) -> None:
        kafka_broker.produce(
            topic, [json.dumps(r) for r in rows], partitions=[i % 2 for i in range(len(rows))]
        )

    def op(op_id: str, ts_ms: int, timeout_ms: int) -> dict:
        return {"op_id": op_id, "key": f"k-{op_id}", "ts": _iso(ts_ms), "timeout_ms": timeout_ms}

    options = {"kafka.bootstrap.servers": kafka_broker.bootstrap_servers, "startingOffsets": "earliest"}
    with start(
        *topics,
        output=out,
        checkpoint=str(tmp_path / "chk"),
        config=_config(watermark_idle_timeout="1 second"),
        trigger=f"processing-time={int(TRIGGER_S)}s",
        source_format="kafka",
        kafka_options=options,
        spark=spark,
    ) as q:
        _waiting_for_data(q)
        now = _now_ms()
        produce(topics[0], [op("warm-up", now, 60_000)])
        produce(topics[1], [{"key": "k-warm-up", "ts": _iso(now)}])
        _seen(out, "outcomes", lambda rows: len(rows) >= 1, timeout_s=120)
        warm = q.query.lastProgress["batchId"] + 1
        t0 = _now_ms()
        ids = [f"op-{i}" for i in range(4)]
        produce(topics[0], [op(i, t0, TIMEOUT_MS) for i in ids])
        produce(topics[1], [{"key": "k-op-0", "ts": _iso(t0 + 100)}])
        seen = _seen(
            out, "outcomes", lambda rows: len(rows) == len(ids) + 1, timeout_s=TIMEOUT_MS / 1000 + 60
        )
        rows = [r for r in _rows(out, "outcomes") if r["op_id"] != "warm-up"]
        statuses = {r["op_id"]: r["status"] for r in rows}
        assert statuses == {i: "completed" if i == "op-0" else "expired" for i in ids}
        assert _rows(out, "rejected") == []
        lags = _lags(seen, rows)
        bound = _bound_s(q, since=warm)
        assert q._reaper.margin_ms() == 0  # Spark asks the wake for offsets before the broker
        print(
            f"expiry lag on a quiet Kafka stream (s): {sorted(round(x, 2) for x in lags)}, bound {bound:.2f}"
        )
        assert max(lags) <= bound, lags
