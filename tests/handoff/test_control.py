"""The control plane after a micro-batch (``handoff.control``), without Spark: its steps in
order (pending, wake, partitions' watermarks, reaper, totals), their files on disk, and a
replay that writes what the first attempt wrote."""

from __future__ import annotations

import os

import pyarrow as pa

from spark_purgatory.delta.staging import STAGED
from spark_purgatory.handoff.control import MicroBatchControl
from spark_purgatory.handoff.partitions import PartitionWatermarks, cap_before, maxima_text
from spark_purgatory.handoff.reaper import ExpirationReaper
from spark_purgatory.handoff.wake import Wake
from spark_purgatory.state.pending_counts import PendingRecord

T0 = 1_767_225_600_000  # 2026-01-01
DELAYS = {"operations": 15_000, "events": 15_000}


def calls(batch_time_ms: int, *, relayed: int = 0, pending: tuple[int, ...] = (3, 2)) -> pa.Table:
    """A micro-batch's metrics rows: shard s holds ``pending[s]`` operations; shard 0 relayed
    ``relayed`` rows and read the operations' Kafka partitions 0 and 1."""
    rows = [
        {
            "shard": shard,
            "batch_time_ms": batch_time_ms,
            "pending": n,
            "buffered": 1,
            "relayed": relayed if shard == 0 else 0,
            "watermark_ms": T0,
            "proposed_operations_watermark_ms": T0 + 500,
            "partition_maxima": maxima_text({"operations": {0: T0 + 60_000, 1: T0 + 40_000}})
            if shard == 0
            else None,
        }
        for shard, n in enumerate(pending)
    ]
    return pa.Table.from_pylist(rows, schema=STAGED)


def sink_figures(batch_id: int, *, relayed: int = 0) -> dict:
    """What the sink says of a micro-batch (``delta.sink.Written.figures``)."""
    return {
        "batch_id": batch_id,
        "completed": 4,
        "expired": 1,
        "unmatched": 0,
        "rejected": 0,
        "relayed": relayed,
        "watermark_ms": T0,
        "operations_watermark_ms": T0 + 500,
        "events_watermark_ms": None,
        "staged_bytes": 0,
        "committed": [],
    }


class Parts:
    """A control plane of real parts under ``root``, whose calls are journaled in order."""

    def __init__(self, root, journal: list[str]) -> None:
        self.wake = Wake.under(str(root / "chk"), cross_shard=2)
        self.partitions = PartitionWatermarks(str(root / "state" / "watermarks"), DELAYS)
        self.reaper = ExpirationReaper(self.wake.root, 1_000, clock=None)
        self.record = PendingRecord.under(str(root / "chk"))
        self.totals: list[dict] = []
        for name, part, method in (
            ("pending", self.record, "write"),
            ("wake", self.wake, "after"),
            ("partitions", self.partitions, "observe"),
            ("reaper", self.reaper, "observe"),
        ):
            _journaled(part, method, journal, name)

        def on_batch(figures: dict) -> None:
            journal.append("totals")
            self.totals.append(figures)

        self.control = MicroBatchControl(
            wake=self.wake,
            partitions=self.partitions,
            reaper=self.reaper,
            pending=self.record,
            on_batch=on_batch,
        )

    def files(self) -> dict:
        """What the control plane wrote: wake files, partitions files, the pending record."""
        root = self.partitions.root
        return {
            "wake": self.wake.batches(),
            "partitions": sorted(os.listdir(root)) if os.path.isdir(root) else [],
            "pending": self.record.read(),
        }


def _journaled(part, method: str, journal: list[str], name: str) -> None:
    real = getattr(part, method)

    def call(*args, **kwargs):
        journal.append(name)
        return real(*args, **kwargs)

    setattr(part, method, call)


def test_the_control_plane_counts_pending_wakes_posts_the_partitions_tells_the_reaper_then_the_totals(
    tmp_path,
):
    journal: list[str] = []
    parts = Parts(tmp_path, journal)
    figures = parts.control.after(
        7, calls(T0, relayed=2), sink_figures(7, relayed=2), watermarks={"operations": T0}
    )
    assert journal == ["pending", "wake", "partitions", "reaper", "totals"]
    # the figures: the sink's, with every shard's pending count, in on_batch's order
    assert parts.totals == [figures] and list(figures)[:3] == ["batch_id", "pending", "completed"]
    assert figures["pending"] == 5 and parts.control.pending == {0: 3, 1: 2}
    # the files the next micro-batch reads: a wake file for the relays, the partitions' watermark
    assert parts.files() == {"wake": [7], "partitions": [f"{T0:015d}.json"], "pending": {0: 3, 1: 2}}
    assert cap_before(parts.partitions.root, T0 + 1) == T0 + 40_000 - 15_000  # partition 1 holds it
    assert parts.wake.owed == 7  # the cross-shard group (2) did not run after it
    assert parts.reaper.waiting == {0: 4, 1: 3} and parts.reaper.batch_times == {7: T0}


def test_a_replayed_micro_batch_writes_what_its_first_attempt_wrote(tmp_path):
    first = Parts(tmp_path, [])
    first.control.after(7, calls(T0, relayed=2), sink_figures(7, relayed=2), watermarks={})
    written = first.files()
    first.control.after(7, calls(T0, relayed=2), sink_figures(7, relayed=2), watermarks={})  # Spark again
    assert first.files() == written
    restarted = Parts(tmp_path, [])  # the driver died before Spark recorded 7: a new one replays it
    assert restarted.control.pending_at_start == {0: 3, 1: 2}
    figures = restarted.control.after(7, calls(T0, relayed=2), sink_figures(7, relayed=2), watermarks={})
    assert restarted.files() == written and figures == first.totals[-1]


def test_a_micro_batch_no_shard_ran_in_only_reaches_the_totals(tmp_path):
    """A micro-batch without shard calls (Spark found no input for any group): no file is
    written; the totals count it, with the pending counts the checkpoint's record holds."""
    PendingRecord.under(str(tmp_path / "chk")).write(3, {0: 4, 2: 1})
    journal: list[str] = []
    parts = Parts(tmp_path, journal)
    none = calls(T0, pending=())
    figures = parts.control.after(4, none, {**sink_figures(4), "watermark_ms": None}, watermarks={})
    assert journal == ["wake", "reaper", "totals"]  # the reaper hears nothing: no rows
    assert parts.files() == {"wake": [], "partitions": [], "pending": {0: 4, 2: 1}}
    assert figures["pending"] == 5 and parts.reaper.waiting == {}


def test_each_part_is_optional(tmp_path):
    control = MicroBatchControl()
    figures = control.after(0, calls(T0, relayed=1), sink_figures(0, relayed=1), watermarks={})
    assert figures["pending"] == 5 and os.listdir(tmp_path) == []
