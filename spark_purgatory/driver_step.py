"""The driver's half of a micro-batch: the output written, then the input's control plane.

``DriverStep`` is what ``start`` gives Spark for each micro-batch.  Both halves run before
Spark records the micro-batch as done, so what the control plane writes is read by the next
trigger; a replay runs both again, to the same effect.  One at a time: a micro-batch, a
linger drain and the final flush never overlap, and ``hold`` lets the micro-batch under way
finish and refuses the next (``STOPPING``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pyarrow as pa

from .delta.sink import PurgatorySink, Written
from .handoff.control import MicroBatchControl
from .runtime.call_site import kept_call_site

log = logging.getLogger(__name__)

#: the error of a micro-batch refused because its query is stopping (``hold``): the batch did
#: nothing, so the next start runs it; the handle takes it for a clean stop
STOPPING = "the query is stopping: micro-batch not started"


class DriverStep:
    """Each micro-batch on the driver: ``sink`` writes its output (records the staged rows
    exactly once, commits what is ready), then ``control`` runs the input's control plane
    (the wake, the partitions' watermarks, the reaper, the totals)."""

    def __init__(self, sink: PurgatorySink, control: MicroBatchControl) -> None:
        self.sink = sink
        self.control = control
        #: the last micro-batch's milliseconds on the driver, by step (logged at DEBUG)
        self.timings: dict[str, float] = {}
        self._lock = threading.Lock()  # micro-batches, linger drains and the flush never overlap
        self._holding = False  # the query is stopping: refuse micro-batches (``hold``)
        #: a micro-batch of the sink JAR's sink has begun (its tasks may run) and not ended;
        #: ``_ended`` is notified when it ends (``begin_staged``, ``end_staged``)
        self._begun = False
        self._ended = threading.Condition()

    def __getstate__(self) -> dict:
        # Spark Connect pickles the foreachBatch function to run it in the server's Python
        state = dict(self.__dict__)
        del state["_lock"]
        del state["_ended"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._ended = threading.Condition()

    def __call__(self, batch: Any, batch_id: int) -> None:
        """``foreachBatch``: micro-batch ``batch_id``'s output, then its control plane;
        refused while the query stops."""
        batch_id = int(batch_id)
        with self._lock, kept_call_site(batch.sparkSession):
            if self._holding:
                raise RuntimeError(f"{STOPPING} ({batch_id})")
            self._control(self.sink(batch, batch_id))

    def begin_staged(self) -> None:
        """A micro-batch of the sink JAR's sink begins, before its tasks run: refused while the
        query stops."""
        with self._ended:
            if self._holding:
                raise RuntimeError(f"{STOPPING} (the next)")
            self._begun = True

    def take_staged(self, staged: pa.Table, batch_id: int, spark: Any) -> None:
        """The sink JAR's commit: micro-batch ``batch_id``'s ``STAGED`` rows to the sink, then
        its control plane.  Taken even while the query stops: it began before."""
        try:
            with self._lock, kept_call_site(spark):
                self._control(self.sink.take_staged(staged, batch_id, spark))
        finally:
            self.end_staged()

    def end_staged(self, batch_id: int | None = None) -> None:
        """The micro-batch begun (``begin_staged``) is over: taken, or failed (``batch_id``)."""
        with self._ended:
            self._begun = False
            self._ended.notify_all()

    def hold(self, timeout: float | None) -> bool:
        """Let the micro-batch under way (or a linger drain) finish, then refuse new ones with
        ``STOPPING``.  False when the one under way did not finish within ``timeout`` seconds
        (it may then be cut short)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        finished = self._lock.acquire(timeout=-1 if timeout is None else timeout)
        with self._ended:
            self._holding = True
        if finished:
            self._lock.release()
        # a micro-batch of the sink JAR's sink that began runs its tasks before the sink sees
        # it, and its commit takes the lock: let it end too (``begin_staged``)
        with self._ended:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ended = self._ended.wait_for(lambda: not self._begun, timeout=left)
        return finished and ended

    def drain_lingering(self) -> list[dict]:
        """The sink's linger drain, between micro-batches."""
        with self._lock:
            return self.sink.drain_lingering()

    def linger_due(self) -> bool:
        """Can a linger drain have anything to commit now?"""
        return self.sink.linger_due()

    def close(self) -> list[dict]:
        """Flush everything the sink still holds."""
        with self._lock:
            return self.sink.close()

    def _control(self, written: Written) -> dict:
        """The control plane of a micro-batch the sink wrote; its figures."""
        began = time.perf_counter()
        figures = self.control.after(
            written.batch_id, written.calls, written.figures, watermarks=written.watermarks
        )
        timings = dict(self.sink.timings)
        timings["report"] = round(timings.get("report", 0.0) + 1000 * (time.perf_counter() - began), 1)
        self.timings = timings
        log.debug(
            "micro-batch %s on the driver: %s",
            written.batch_id,
            timings,
            extra={"sink_ms": {"batch_id": written.batch_id, **timings}},
        )
        return figures
