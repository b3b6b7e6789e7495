"""The contract under every split, on Spark: ``start()`` over files cut at random event times.

A random workload over six keys and three shards (all six conditions, multi-key operations
across shards, a repeated op_id, invalid rows, fields a condition does not use, events
before, during and after their operations' windows, cancels by op_id and by key) is
written as two inputs in event-time order, each cut into files at its own random event
times, one file per stream per micro-batch.  With Spark's ``min`` policy no row of an input
in event-time order is behind the watermark, so the contract says the Delta tables hold
exactly what the reference model gives for the whole input in one micro-batch, then the end
of input (but for the progress of an ``offset`` operation that holds on arrival: the
contract's one exception), and exactly what it gives micro-batch by micro-batch at Spark's
watermarks: outcomes (status, ``resolved_at``, matched events, progress), unmatched events
with their reasons, rejects, and the warnings of the operations drawn with ``warn_ms``.
"""

from __future__ import annotations

import math
from itertools import zip_longest

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.handoff.end_of_input import end_watermark_ms
from tests.support.reference_model import Batch, run, spark_watermarks
from tests.support.stream_helpers import T0, Files, ev, op

pytestmark = pytest.mark.spark

KEYS = [f"key-{i}" for i in range(6)]
SOURCES = ["s0", "s1", "s2"]
CONFIG = PurgatoryConfig(
    shards=3,
    tick_ms=10,
    wheel_size=8,
    max_timeout_ms=60_000,
    watermark_delay="200 milliseconds",
    source_max_files_per_trigger=1,
    accumulator_linger_ms=0,
)


def _workload(rng: np.random.Generator) -> tuple[list[dict], list[dict]]:
    """Operations and events in the reference's form (times in ms from T0)."""
    ops = []
    for i in range(36):
        cond = str(rng.choice(["any", "count", "sum", "all", "offset", "quorum"]))
        keys = sorted(set(rng.choice(KEYS, int(rng.integers(1, 3))).tolist()))
        o = {
            "op_id": f"op-{i}",
            "keys": keys,
            "ts": int(rng.integers(0, 4_000)),
            "timeout_ms": int(rng.integers(0, 1_500)),
            "condition": cond,
        }
        if cond in ("all", "quorum"):
            o["members"] = sorted(set(rng.choice(SOURCES, int(rng.integers(1, 3))).tolist()))
        if cond == "quorum":
            o["target"] = float(rng.integers(1, len(o["members"]) + 1))
        elif cond not in ("any", "all"):
            o["target"] = float(rng.integers(0, 3) * (1 if cond == "count" else 5))
        ops.append(o)
    lead = np.random.default_rng(791)  # warnings, drawn apart: the draws above stay as they were
    for o in ops:
        if o["timeout_ms"] and lead.random() < 0.5:
            o["warn_ms"] = int(lead.integers(1, o["timeout_ms"] + 1))
    ops.append({**ops[3], "ts": ops[3]["ts"] + 100})  # a repeated op_id: the later one is rejected
    ops.append(
        {
            "op_id": "bad",
            "keys": ["key-0"],
            "ts": 50,
            "timeout_ms": -5,
            "condition": "any",
            "_reason": "negative_timeout",
        }
    )
    # fields the condition does not use: rejected, not ignored (a quorum meant, count sent)
    unused = {"keys": ["key-1"], "ts": 60, "timeout_ms": 500, "target": 1.0}
    ops.append({"op_id": "unused-members", **unused, "condition": "count", "members": ["s0"]})
    ops.append({"op_id": "unused-target", **unused, "condition": "any"})
    ops[-2]["_reason"], ops[-1]["_reason"] = "unused_members", "unused_target"
    events = []
    for _ in range(90):
        e = {"key": str(rng.choice(KEYS)), "ts": int(rng.integers(0, 6_000))}
        if rng.random() < 0.4:
            e["value"] = float(rng.integers(0, 12))
        if rng.random() < 0.4:
            e["source"] = str(rng.choice(SOURCES))
        if rng.random() < 0.1:
            e["op_id"] = f"op-{rng.integers(0, 36)}"
        events.append(e)
    more = np.random.default_rng(79)  # cancels, drawn apart: the draws above stay as they were
    for o in more.choice(ops[:36], 8, replace=False):  # in the window or at the deadline
        cancel = {"key": o["keys"][0], "ts": o["ts"] + int(more.integers(0, o["timeout_ms"] + 1))}
        events.append({**cancel, **({"op_id": o["op_id"]} if more.random() < 0.5 else {}), "cancel": True})
    return sorted(ops, key=lambda o: o["ts"]), sorted(events, key=lambda e: e["ts"])


def _cut(rows: list[dict], rng: np.random.Generator, n: int) -> list[list[dict]]:
    """``rows`` (in event-time order) cut at ``n - 1`` random event times."""
    times = np.sort(rng.integers(0, 6_000, n - 1))
    at = np.searchsorted([r["ts"] for r in rows], times)
    return [list(part) for part in np.split(np.array(rows, dtype=object), at)]


def _line(row: dict, kind: str) -> str:
    fields = {k: v for k, v in row.items() if k not in ("_reason", "ts")}
    if kind == "ops":
        return op(
            fields.pop("op_id"),
            fields.pop("keys"),
            row["ts"],
            fields.pop("timeout_ms"),
            fields.pop("condition"),
            **fields,
        )
    return ev(fields.pop("key"), row["ts"], **fields)


def _ms(values: pd.Series) -> list[int]:
    return [int(pd.Timestamp(v).value // 1_000_000) - T0 for v in values]


def _plain(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _names(names) -> list | None:
    return None if names is None else list(names)


def test_files_cut_at_random_event_times_give_the_reference_outcomes(spark, tmp_path):
    rng = np.random.default_rng(31)
    ops, events = _workload(rng)
    files = Files(str(tmp_path / "input"))
    cut = list(zip_longest(_cut(ops, rng, 5), _cut(events, rng, 7), fillvalue=[]))
    for op_rows, event_rows in cut:  # a micro-batch reads one file of each input
        files.add(ops=[_line(o, "ops") for o in op_rows], events=[_line(e, "events") for e in event_rows])
    output, checkpoint = f"file://{tmp_path}/tables", f"file://{tmp_path}/checkpoint"
    with start(
        files.ops,
        files.events,
        output=output,
        checkpoint=checkpoint,
        config=CONFIG,
        end_of_input=True,
        spark=spark,
    ) as query:
        query.await_termination()

    # the reference, micro-batch by micro-batch at Spark's watermarks, then the end of input
    end = end_watermark_ms(CONFIG.max_timeout_ms, CONFIG.tick_ms)
    delays = (CONFIG.input_delay_ms("operations"), CONFIG.input_delay_ms("events"))
    wms = spark_watermarks(cut, delays)
    expected = run([*(Batch(o, e, wm) for (o, e), wm in zip(cut, wms, strict=True)), Batch([], [], end)])
    whole = run([Batch(ops, events, 0), Batch([], [], end)])  # the same but offset progress (contract)
    offset = {o["op_id"] for o in ops if o["condition"] == "offset"}
    assert {i: o[:3] if i in offset else o for i, o in expected.outcomes.items()} == {
        i: o[:3] if i in offset else o for i, o in whole.outcomes.items()
    }
    assert expected.unmatched == whole.unmatched and expected.rejected == whole.rejected
    assert {i: w[:1] if i in offset else w for i, w in expected.warnings.items()} == {
        i: w[:1] if i in offset else w for i, w in whole.warnings.items()
    }
    outcomes = DeltaTable(f"{tmp_path}/tables/outcomes").to_pandas()
    got = {
        r.op_id: (r.status, at, int(r.matched_events), _plain(float(r.progress)))
        for r, at in zip(outcomes.itertuples(), _ms(outcomes["resolved_at"]), strict=True)
    }
    assert len(got) == len(outcomes), "an operation has two outcomes"
    assert got == expected.outcomes

    unmatched = DeltaTable(f"{tmp_path}/tables/unmatched_events").to_pandas()
    reported = sorted(
        (
            (r.key, ts, _plain(r.op_id), _plain(r.source), _plain(r.value), r.reason)
            for r, ts in zip(unmatched.itertuples(), _ms(unmatched["ts"]), strict=True)
        ),
        key=repr,
    )
    assert reported == expected.unmatched
    rejected = DeltaTable(f"{tmp_path}/tables/rejected").to_pandas()
    assert sorted(zip(rejected["source"], rejected["reason"], strict=True)) == sorted(
        (s, reason) for s, reason, _, _ in expected.rejected
    )
    warnings = DeltaTable(f"{tmp_path}/tables/warnings").to_pandas()
    warned = {
        r.op_id: (at, _plain(float(r.progress)), _names(r.reported), _names(r.missing))
        for r, at in zip(warnings.itertuples(), _ms(warnings["warned_at"]), strict=True)
    }
    assert len(warned) == len(warnings), "an operation warned twice"
    assert warned == expected.warnings and len(warned) >= 5
    assert len(expected.outcomes) > 30 and {"after_resolution", "no_operation"} <= {r[-1] for r in reported}
    assert "cancelled" in {o[0] for o in expected.outcomes.values()}
