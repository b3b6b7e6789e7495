"""A watermark per input: two streams that run apart in event time lose no operation.

Each trigger brings one operations file and one events file; every events file reaches
10 s further in event time than the operations file of the same trigger (the delay is
2 s), as when two sources are cut independently.  With Spark's default ``min`` policy the
operator's watermark is the operations', so no operation is ``late`` and the outcomes are
those of the engine on all the input at once (the reference); with ``max`` the events'
watermark runs ahead and operations become ``late`` (the policy is honoured).
"""

from __future__ import annotations

import pandas as pd
import pytest

from spark_purgatory.config import ConfigError, PurgatoryConfig
from spark_purgatory.engine.purgatory import Purgatory
from tests.support.stream_helpers import T0, Files, ev, op, replicas_warning, run_stream

pytestmark = pytest.mark.spark

CONFIG = PurgatoryConfig(shards=2, tick_ms=100, wheel_size=16, watermark_delay="2 seconds")
POLICY = "spark.sql.streaming.multipleWatermarkPolicy"
TRIGGERS, PER_TRIGGER, SPAN_MS, AHEAD = 3, 12, 10_000, 1  # events files run one span ahead
TIMEOUT_MS = 6_000
PAD_MS = 200_000  # the last trigger moves both inputs past every deadline


def _workload(triggers: int = TRIGGERS) -> tuple[list[list[dict]], list[list[dict]]]:
    """Per trigger (``triggers`` of them): operations (with a straggler 1.5 s behind the
    previous file's last one, within the delay) and events (those of the operations ``AHEAD``
    spans later)."""
    ops: list[list[dict]] = []
    for t in range(triggers):
        rows = [
            {"op_id": f"o{t}-{j}", "key": f"k{t}-{j}", "ts": t * SPAN_MS + j * SPAN_MS // PER_TRIGGER}
            for j in range(PER_TRIGGER)
        ]
        if t:
            rows.append({"op_id": f"straggler-{t}", "key": f"ks{t}", "ts": t * SPAN_MS - 1_500})
        ops.append(rows)
    confirmations = [
        [
            {"key": o["key"], "ts": o["ts"] + (i * 1_300) % 8_000}  # some after the deadline (6 s)
            for i, o in enumerate(rows)
            if i % 4 != 3  # a quarter never confirmed
        ]
        for rows in ops
    ]
    events = [[] for _ in range(triggers)]
    for t, rows in enumerate(confirmations):
        events[max(t - AHEAD, 0)].extend(rows)
    return ops, events


def _write(files: Files, ops: list[list[dict]], events: list[list[dict]]) -> None:
    for op_rows, event_rows in zip(ops, events, strict=True):
        files.add(
            ops=[op(o["op_id"], o["key"], o["ts"], TIMEOUT_MS) for o in op_rows],
            events=[ev(e["key"], e["ts"]) for e in event_rows],
        )
    files.add(ops=[op("pad", "k-pad-op", PAD_MS, 600_000)], events=[ev("k-pad", PAD_MS)])


def _reference(ops: list[list[dict]], events: list[list[dict]], final_ms: int) -> dict:
    """The engine on all the input at once: op_id -> (status, resolved_at relative to T0)."""
    frame = pd.DataFrame(
        [
            {"op_id": o["op_id"], "keys": [o["key"]], "ts": T0 + o["ts"], "timeout_ms": TIMEOUT_MS}
            for r in ops
            for o in r
        ]
    )
    evs = pd.DataFrame([{"key": e["key"], "ts": T0 + e["ts"]} for r in events for e in r])
    result = Purgatory(CONFIG).replay(frame, evs, final_watermark_ms=final_ms)
    return {r.op_id: (r.status, int(r.resolved_at) - T0) for r in result.outcomes.itertuples()}


def _resolved(run) -> dict:
    return {r.op_id: (r.status, int(r.resolved_at_ms) - T0) for r in run.outcomes.itertuples()}


def _assert_events_run_ahead(ops, events) -> None:
    for op_rows, event_rows in zip(ops[:-1], events[:-1], strict=True):
        ahead = max(e["ts"] for e in event_rows) - max(o["ts"] for o in op_rows)
        assert ahead > CONFIG.watermark_delay_ms  # the skew this test is about


def test_skewed_streams_lose_no_operation_under_min(spark, tmp_path):
    ops, events = _workload()
    _assert_events_run_ahead(ops, events)
    files = Files(str(tmp_path))
    _write(files, ops, events)
    assert spark.conf.get(POLICY, "min") == "min"

    with replicas_warning():
        run = run_stream(spark, files, CONFIG)

    assert len(run.rejected) == 0  # in particular no `late` row: stragglers are within the delay
    final = max(run.watermarks.values())
    assert final == T0 + PAD_MS - CONFIG.watermark_delay_ms
    expected = _reference(ops, events, final)
    assert _resolved(run) == expected
    completed = {k for k, (status, _) in expected.items() if status == "completed"}
    # the join's matches: an event on the key within [ts, deadline)
    matched = {
        o["op_id"]
        for r in ops
        for o in r
        if any(e["key"] == o["key"] and o["ts"] <= e["ts"] < o["ts"] + TIMEOUT_MS for x in events for e in x)
    }
    assert completed == matched and len(matched) >= TRIGGERS * PER_TRIGGER // 2


def test_max_policy_is_honoured(spark, tmp_path):
    """Two triggers are enough: the first events file already reaches past the second
    operations file."""
    ops, events = _workload(2)
    files = Files(str(tmp_path))
    _write(files, ops, events)
    spark.conf.set(POLICY, "max")
    try:
        with replicas_warning():
            run = run_stream(spark, files, CONFIG)
    finally:
        spark.conf.unset(POLICY)
    late = run.rejected[(run.rejected["reason"] == "late") & (run.rejected["source"] == "operations")]
    assert len(late) > 0  # the events' watermark drives: operations behind it arrive late
    assert len(run.outcomes) + len(late) == sum(len(r) for r in ops)


def test_per_input_delays_default_to_watermark_delay_and_are_checked():
    config = PurgatoryConfig.from_mapping({"watermark.delay": "5 s", "watermark.delay.events": "30 seconds"})
    assert (config.input_delay_ms("operations"), config.input_delay_ms("events")) == (5_000, 30_000)
    with pytest.raises(ConfigError, match="watermark.delay.operations"):
        PurgatoryConfig.from_mapping({"watermark.delay.operations": "soon"})
