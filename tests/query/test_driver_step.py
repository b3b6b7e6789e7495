"""The driver's half of a micro-batch (``driver_step.DriverStep``), without Spark: the output
first, then the control plane, one micro-batch at a time; nothing of the control plane for a
micro-batch whose output failed; a stop that waits for the micro-batch under way (both
halves) and refuses the next.  (That it pickles for Spark Connect: ``test_query.py``.)"""

from __future__ import annotations

import threading
import time

import pytest

from spark_purgatory.delta.sink import Written
from spark_purgatory.driver_step import STOPPING, DriverStep
from spark_purgatory.handoff.control import MicroBatchControl
from spark_purgatory.handoff.wake import Wake
from tests.delta.test_accumulator import Clock, make_sink
from tests.handoff.test_control import T0, calls, sink_figures


class _Session:
    """What ``kept_call_site`` asks of a classic session: the stream thread's call site."""

    class sparkContext:  # noqa: N801 - PySpark's name
        class _jsc:  # noqa: N801
            @staticmethod
            def getLocalProperty(_key: str) -> None:  # noqa: N802
                return None


class _Sink:
    """Stands in for ``PurgatorySink``: "commits" micro-batch N as ``<out>/N.committed`` (what a
    Delta commit is to the control plane: a file the output holds), or fails as a store would."""

    def __init__(self, out, *, refuse: int | None = None) -> None:
        self.out = out
        self.refuse = refuse
        self.timings: dict[str, float] = {}
        self.out.mkdir()

    def take_staged(self, _staged, batch_id: int, _spark) -> Written:
        if batch_id == self.refuse:
            raise OSError(f"the store refused micro-batch {batch_id}")
        (self.out / f"{batch_id}.committed").write_text("rows")
        self.timings = {"collect": 1.0, "record": 1.0, "drain": 1.0, "report": 0.5}
        return Written(batch_id, calls(T0 + batch_id, relayed=1), sink_figures(batch_id, relayed=1), {})


def _step(tmp_path, *, refuse: int | None = None) -> tuple[DriverStep, list[tuple[int, list[str]]]]:
    """A step whose control plane notes, at its last call, the output committed so far."""
    out = tmp_path / "out"
    seen: list[tuple[int, list[str]]] = []

    def on_batch(figures: dict) -> None:
        seen.append((figures["batch_id"], sorted(p.name for p in out.iterdir())))

    wake = Wake.under(str(tmp_path / "chk"), cross_shard=2)
    return DriverStep(_Sink(out, refuse=refuse), MicroBatchControl(wake=wake, on_batch=on_batch)), seen


def test_the_control_plane_runs_after_the_output_of_its_micro_batch_committed(tmp_path):
    step, seen = _step(tmp_path)
    for batch_id in (0, 1):
        step.begin_staged()
        step.take_staged(None, batch_id, _Session())
    assert seen == [(0, ["0.committed"]), (1, ["0.committed", "1.committed"])]
    assert step.control.wake.batches() == [0, 1]  # each relayed: a wake file each, after its commit
    assert set(step.timings) == {"collect", "record", "drain", "report"} and step.timings["report"] >= 0.5


def test_a_micro_batch_whose_output_failed_reaches_no_part_of_the_control_plane(tmp_path):
    step, seen = _step(tmp_path, refuse=1)
    step.begin_staged()
    step.take_staged(None, 0, _Session())
    step.begin_staged()
    with pytest.raises(OSError, match="refused micro-batch 1"):
        step.take_staged(None, 1, _Session())
    assert seen == [(0, ["0.committed"])] and step.control.wake.batches() == [0]  # no wake for 1
    assert step.hold(5) is True  # the failed micro-batch ended: a stop does not wait for it


def test_a_stop_waits_for_a_begun_micro_batch_and_refuses_the_next(tmp_path):
    """A micro-batch of the sink JAR's sink runs its tasks between ``begin_staged`` and its
    commit: ``hold`` waits for it to end (its commit still taken), then the next is refused
    before it runs; a timeout ends the wait with False."""
    sink = DriverStep(make_sink(tmp_path, Clock()), MicroBatchControl())
    sink.begin_staged()  # micro-batch 0's tasks run
    held: list[bool] = []
    waiting = threading.Thread(target=lambda: held.append(sink.hold(30)))
    waiting.start()
    time.sleep(0.2)
    assert waiting.is_alive() and not held  # the stop waits for the begun micro-batch
    sink.end_staged(0)  # it failed, or (take_staged) it was taken: it is over
    waiting.join(5)
    assert held == [True]
    with pytest.raises(RuntimeError, match=STOPPING):
        sink.begin_staged()  # the next one is refused before its tasks run
    other = DriverStep(make_sink(tmp_path / "other", Clock()), MicroBatchControl())
    other.begin_staged()
    assert other.hold(0.1) is False  # a micro-batch still running after the timeout


def test_a_stop_waits_for_the_control_plane_of_the_micro_batch_under_way(tmp_path):
    """``hold`` returns once the micro-batch under way has run both halves: its wake file is
    written before the handle stops Spark's query."""
    step, _seen = _step(tmp_path)
    inside, release = threading.Event(), threading.Event()
    totals = step.control.on_batch

    def slow_totals(figures: dict) -> None:
        inside.set()
        release.wait(10)
        totals(figures)  # type: ignore[misc]

    step.control.on_batch = slow_totals
    batch = threading.Thread(target=lambda: step.take_staged(None, 0, _Session()))
    step.begin_staged()
    batch.start()
    inside.wait(10)
    held: list[bool] = []
    stopping = threading.Thread(target=lambda: held.append(step.hold(30)))
    stopping.start()
    time.sleep(0.2)
    assert stopping.is_alive() and not held  # the control plane still runs
    release.set()
    stopping.join(10)
    batch.join(10)
    assert held == [True] and step.control.wake.batches() == [0]
