"""A quiet stream: with ``watermark.idle.timeout`` set, expiries come on the clock.

Live ``processing-time`` queries (trigger 1 s, delay 2 s, idle timeout 1 s, linger 0.5 s):
after a few operations both inputs fall silent.  With the idle timeout every operation that
nothing completed expires and is committed to ``outcomes`` within the documented bound after
its deadline passes on the clock plus the delay: one trigger interval (and the reaper's
listing margin) + the micro-batch's own time + ``linger.ms``;
without it none expires (Spark's watermark waits for input); the same after a restart
during the silence, and through Kafka topics (in ``test_kafka.py``, on that file's broker).
Rows that then arrive behind the clock are ``late``.  During the silence, and after the
restart, the desk's views (``pending``, ``at-risk``, ``explain``, the notebook helpers) count
time left on the operator's clock: each operation is due when its expiry comes, within the
bound.  ``deadline.clock=processing``: deadlines from
arrival, on the processing clock.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone

import pytest
from deltalake import DeltaTable

from spark_purgatory import (
    PurgatoryConfig,
    at_risk,
    at_risk_table,
    explain,
    pending_operations,
    pending_table,
    start,
)
from spark_purgatory.checkpoint_paths import Checkpoint
from spark_purgatory.handle import _waiting_for_data as _quiet
from spark_purgatory.handle import listed_first
from spark_purgatory.handoff.clock_record import read_clock_record
from spark_purgatory.inspect import checkpoint_status

pytestmark = pytest.mark.spark

#: the delay covers the trigger interval: a live row waits up to one interval to be read
TRIGGER_S, DELAY_S, LINGER_S = 1.0, 2.0, 0.5
#: the linger drain's own commit and the polling
SLACK_S = 1.5
TIMEOUT_MS = 6_000


def _config(**extra) -> PurgatoryConfig:
    return PurgatoryConfig(
        shards=2,
        tick_ms=100,
        watermark_delay=f"{int(DELAY_S)} second",
        accumulator_linger_ms=int(LINGER_S * 1000),
        **extra,
    )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


class Input:
    """Two input directories written live, one file per call, event time = now."""

    def __init__(self, root) -> None:
        self.ops, self.events = str(root / "ops"), str(root / "events")
        os.makedirs(self.ops), os.makedirs(self.events)
        self.files = 0

    def write(self, directory: str, rows: list[dict]) -> None:
        path = os.path.join(directory, f"part-{self.files:04d}.json")
        self.files += 1
        with open(path + ".tmp", "w", encoding="utf-8") as out:
            out.write("".join(json.dumps(row) + "\n" for row in rows))
        os.rename(path + ".tmp", path)  # whole: the file source may list it at once

    def operations(self, ids: list[str], ts_ms: int, timeout_ms: int = TIMEOUT_MS) -> None:
        rows = [{"op_id": i, "key": f"k-{i}", "ts": _iso(ts_ms), "timeout_ms": timeout_ms} for i in ids]
        self.write(self.ops, rows)

    def event(self, key: str, ts_ms: int) -> None:
        self.write(self.events, [{"key": key, "ts": _iso(ts_ms)}])


def _now_ms() -> int:
    return int(time.time() * 1000)


def _rows(out: str, table: str) -> list[dict]:
    return DeltaTable(os.path.join(out, table)).to_pyarrow_table().to_pylist()


def _seen(out: str, table: str, wanted, timeout_s: float) -> dict[str, float]:
    """Poll ``table`` until ``wanted(rows)``; return when (epoch s) each op_id (or raw row)
    was first seen committed."""
    seen: dict[str, float] = {}
    limit = time.time() + timeout_s
    while True:
        rows = _rows(out, table)
        for row in rows:
            seen.setdefault(row.get("op_id") or row.get("raw"), time.time())
        if wanted(rows) or time.time() > limit:
            return seen
        time.sleep(0.25)


def _warm(data: Input, out: str) -> None:
    """One operation completed end to end: the first micro-batches (Python workers, the
    sender's first job) take seconds that are not the clock's."""
    now = _now_ms()
    data.operations(["warm-up"], now, timeout_ms=60_000)
    data.event("k-warm-up", now)
    _seen(out, "outcomes", lambda rows: len(rows) >= 1, timeout_s=120)


def _waiting_for_data(query, timeout_s: float = 120) -> None:
    """Until Spark's last trigger found nothing to read (the run has begun)."""
    limit = time.time() + timeout_s
    while not _quiet(query.query.status):
        assert time.time() < limit, query.query.status
        time.sleep(0.2)


def _start(spark, root, config: PurgatoryConfig):
    inp = root / "ops"
    return start(
        str(inp),
        str(root / "events"),
        output=str(root / "out"),
        checkpoint=str(root / "chk"),
        config=config,
        trigger=f"processing-time={int(TRIGGER_S)}s",
        spark=spark,
        source_format="json",
    )


def _bound_s(query, since: int = 0) -> float:
    """The documented bound: the reaper's listing margin past the deadline plus the delay
    (none where Spark lists the wake first, as on every checkpoint here), then the next
    trigger (up to an interval, or a micro-batch when they take longer and run back to
    back), that micro-batch's own time, ``linger.ms``; with the micro-batch times measured
    (a shared 2-core machine can be slow)."""
    progress = [p for p in query.query.recentProgress if p["batchId"] >= since]
    batch_s = max((p["durationMs"].get("triggerExecution", 0) for p in progress), default=0) / 1000
    margin_s = query._reaper.margin_ms() / 1000 if query._reaper is not None else 0.0
    return margin_s + max(TRIGGER_S, batch_s) + batch_s + LINGER_S + SLACK_S


def _lags(seen: dict[str, float], rows: list[dict], clock_ms: int | None = None) -> list[float]:
    """Each expiry's wall-clock lag: committed (seen) minus the moment it became decidable,
    its deadline passing on the clock plus the delay (or ``clock_ms``, if later)."""
    lags = []
    for row in rows:
        if row["status"] != "expired":
            continue
        decidable = row["deadline"].timestamp() + DELAY_S
        if clock_ms is not None:
            decidable = max(decidable, clock_ms / 1000)
        lags.append(seen[row["op_id"]] - decidable)
    return lags


def _due_on_the_desk(
    chk: str, out: str, within: str, spark=None
) -> dict[str, dict[str, tuple[float, float]]]:
    """When (epoch s) each of the desk's views says each pending operation is due: its
    ``time_left_ms`` added to the moments just before and just after the call (a view counts
    from some moment inside its call, which on a loaded machine may take seconds).  The
    terminal's views (``pending_table``, ``at_risk_table`` within ``within``, ``explain``) and,
    given a session, the notebook's (``pending_operations``, ``at_risk``)."""

    def asked(call):
        before = time.time()
        rows = call()
        after = time.time()
        return {
            r["op_id"]: (before + r["time_left_ms"] / 1000, after + r["time_left_ms"] / 1000) for r in rows
        }

    def stories() -> list[dict]:
        found = explain(sorted(views["pending"]), output=out, checkpoint=chk)
        return [s.pending for s in found if s.pending]

    views: dict[str, dict[str, tuple[float, float]]] = {}
    views["pending"] = asked(lambda: pending_table(chk).to_pylist())
    views["at-risk"] = asked(lambda: at_risk_table(chk, within=within).to_pylist())
    views["explain"] = asked(stories)
    if spark is not None:
        views["notebook"] = asked(lambda: pending_operations(chk, spark=spark).toArrow().to_pylist())
        views["notebook at-risk"] = asked(
            lambda: at_risk(chk, within=within, spark=spark).toArrow().to_pylist()
        )
    return views


def _check_the_desk(views: dict, seen: dict[str, float], ids: set, bound: float) -> None:
    """Every view lists ``ids``, each due no later than its expiry was seen committed and at most
    the documented bound before it (the time left is within a trigger of the truth)."""
    for name, due in views.items():
        assert set(due) == ids, (name, due)
        for op_id, (early, late) in due.items():
            assert early <= seen[op_id] + 0.25 and seen[op_id] - late <= bound, (
                name,
                op_id,
                due,
                seen[op_id],
            )


def test_a_quiet_stream_expires_on_the_clock_and_rows_behind_it_are_late(spark, tmp_path):
    """... and during the silence the desk's views count time left on the operator's clock."""
    data = Input(tmp_path)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    ids = [f"op-{i}" for i in range(6)]
    with _start(spark, tmp_path, _config(watermark_idle_timeout="1 second")) as q:
        _waiting_for_data(q)
        _warm(data, out)
        warm = q.query.lastProgress["batchId"] + 1  # the first micro-batches are not the clock's
        t0 = _now_ms()
        data.operations(ids, t0)
        data.event("k-op-0", t0 + 100)  # completes op-0; then both inputs are silent
        limit = time.time() + 60
        while {r["op_id"] for r in pending_table(chk).to_pylist()} != set(ids[1:]):
            assert time.time() < limit
            time.sleep(0.1)
        while (read_clock_record(chk).on_clock_ms or 2**62) > _now_ms():  # the clock has taken over
            assert time.time() < limit
            time.sleep(0.1)
        # Spark's watermark stands at t0 + 100 less the delay: 7.9 s left; the clock says 5 to 6
        views = _due_on_the_desk(chk, out, within="7s", spark=spark)
        assert "the operator's clock" in checkpoint_status(chk)["checkpoint"]["time_left"]
        done = lambda rows: len(rows) == len(ids) + 1  # noqa: E731
        seen = _seen(out, "outcomes", done, timeout_s=TIMEOUT_MS / 1000 + 30)
        rows = [r for r in _rows(out, "outcomes") if r["op_id"] != "warm-up"]
        assert sorted(r["op_id"] for r in rows) == ids
        statuses = {r["op_id"]: r["status"] for r in rows}
        assert statuses == {i: "completed" if i == "op-0" else "expired" for i in ids}
        assert all(r["resolved_at"] == r["deadline"] for r in rows if r["status"] == "expired")
        lags = _lags(seen, rows)
        bound = _bound_s(q, since=warm)
        assert listed_first(q.query, Checkpoint(str(tmp_path / "chk")).wake)  # no listing margin
        assert q._reaper.margin_ms() == 0
        print(f"expiry lag on a quiet stream (s): {sorted(round(x, 2) for x in lags)}, bound {bound:.2f}")
        assert max(lags) <= bound, lags
        _check_the_desk(views, seen, set(ids[1:]), bound)
        # a row behind the clock's watermark is late, reported, never dropped
        behind = _now_ms() - 30_000
        data.operations(["op-late"], behind)
        data.event("k-op-late", behind)
        _seen(out, "rejected", lambda rows: len(rows) >= 2, timeout_s=30)
        rejected = _rows(out, "rejected")
        reasons = sorted((r["source"], r["reason"]) for r in rejected)
        assert reasons == [("events", "late"), ("operations", "late")]
        assert "op-late" not in {r["op_id"] for r in _rows(out, "outcomes")}


def test_without_the_idle_timeout_nothing_expires_and_after_a_restart_the_clock_expires_it(spark, tmp_path):
    """The first run (no idle timeout): once both inputs fall silent, past the bound, nothing
    expires (Spark's watermark waits for input; no reaper, no clock) and the operations stay
    pending; the run after it, with both inputs still silent, expires them once the idle
    timeout has passed since it began."""
    data = Input(tmp_path)
    out = str(tmp_path / "out")
    ids = [f"op-{i}" for i in range(4)]
    timeout_s = 2.0
    with _start(spark, tmp_path, _config()) as q:
        _waiting_for_data(q)
        t0 = _now_ms()
        data.operations(ids, t0, timeout_ms=int(timeout_s * 1000))
        data.event("k-op-0", t0 + 100)  # completes op-0; then both inputs are silent
        _seen(out, "outcomes", lambda rows: len(rows) >= 1, timeout_s=30)
        time.sleep(max(0.0, timeout_s + DELAY_S + _bound_s(q) - (time.time() - t0 / 1000)))  # past the bound
        rows = _rows(out, "outcomes")
        assert [(r["op_id"], r["status"]) for r in rows] == [("op-0", "completed")]
        posted = [n for n in os.listdir(tmp_path / "chk" / "purgatory-wake") if n.startswith("clock")]
        assert q.pending == len(ids) - 1 and posted == []  # no reaper: no clock
    with _start(spark, tmp_path, _config(watermark_idle_timeout="1 second")) as q:
        assert q.pending == len(ids) - 1  # from the checkpoint: the reaper knows something waits
        _waiting_for_data(q)  # the run has begun: Spark found nothing to read
        began = time.time()
        # Spark's watermark says 4 s left (the deadlines less the delay); the clock takes over
        # once the idle timeout has passed since the run began, past every deadline
        views = _due_on_the_desk(str(tmp_path / "chk"), out, within="3s")
        seen = _seen(out, "outcomes", lambda rows: len(rows) == len(ids), timeout_s=60)
        rows = _rows(out, "outcomes")
        assert {r["op_id"]: r["status"] for r in rows} == {
            i: "completed" if i == "op-0" else "expired" for i in ids
        }
        # decidable: the inputs idle in this run, past the deadlines plus the delay
        lags = _lags(seen, rows, clock_ms=int((began + 1.0) * 1000))
        bound = _bound_s(q)
        print(f"expiry lag after a restart (s): {sorted(round(x, 2) for x in lags)}, bound {bound:.2f}")
        assert max(lags) <= bound, lags
        _check_the_desk(views, seen, set(ids[1:]), bound)


def test_deadlines_on_the_processing_clock_run_from_arrival_and_expire_without_input(spark, tmp_path):
    """``deadline.clock=processing``: an operation's deadline is its arrival plus its timeout,
    an event counts by arrival, nothing is late; expiries come with no input, within one
    trigger interval + the micro-batch's time + ``linger.ms`` after the deadline."""
    data = Input(tmp_path)
    out = str(tmp_path / "out")
    day_old = _now_ms() - 86_400_000  # event time does not matter on this clock
    with _start(spark, tmp_path, _config(deadline_clock="processing")) as q:
        _waiting_for_data(q)
        first = time.time()
        data.operations(["op-0"], day_old, timeout_ms=60_000)
        data.operations(["op-1"], day_old, timeout_ms=3_000)
        time.sleep(TRIGGER_S)
        data.event("k-op-0", day_old - 60_000)  # stamped before the operation, arrives after it
        seen = _seen(out, "outcomes", lambda rows: len(rows) == 2, timeout_s=60)
        rows = {r["op_id"]: r for r in _rows(out, "outcomes")}
        assert {i: r["status"] for i, r in rows.items()} == {"op-0": "completed", "op-1": "expired"}
        expired = rows["op-1"]
        assert expired["op_ts"].timestamp() >= first and expired["resolved_at"] == expired["deadline"]
        assert (expired["deadline"] - expired["op_ts"]).total_seconds() == 3.0
        assert _rows(out, "rejected") == []
        lag = seen["op-1"] - expired["deadline"].timestamp()
        bound = _bound_s(q)  # no listing margin: arrival is the clock
        print(f"expiry lag on the processing clock (s): {lag:.2f}, bound {bound:.2f}")
        assert lag <= bound
