"""The expiration reaper: micro-batches on the clock while something waits.

Kafka's ``ExpiredOperationReaper`` thread advances its timer on the wall clock; Spark runs a
micro-batch only when an input has rows.  The reaper is the driver's thread for a
``processing-time`` query: shortly before each trigger it asks the clock for its watermark
and, while something waits in a shard and the value is new, writes ``clock-<posted ms>.txt``
into the wake directory.  Routing sends that line to every shard group, which admits the
micro-batch's rows at Spark's watermark, then moves to the clock and expires what is due.

**Why no row that arrived within its delay is late.**  A value posted at t is t minus the
largest delay.  Spark lists the wake directory first (``wake.wake_first``), so the
micro-batch that reads the post lists every input after t and admits its rows before it
applies the clock.  Where Spark lists the wake last (``listed_first``) the value is also
less ``LISTING_MARGIN_MS``.  Replays are exact: Spark's file source logs what it read.

Invariant: the reaper writes only ``clock-*.txt`` files into the wake directory, and only
while a shard holds something.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ..config import PurgatoryConfig
from ..contract import PROPOSED_WATERMARKS, ms_column
from ..storage import Storage
from .clock import ClockWatermark
from .clock_record import ClockRecorder
from .wake import Wake

log = logging.getLogger(__name__)

#: the first word of a clock line in the wake directory (``routing.route_wake``)
CLOCK_LINE = "clock"
#: a posted file is deleted once written this long before a committed micro-batch started
_MARGIN_MS = 1_000
#: the longest step between two ticks (``ExpirationReaper._until_next_s``)
_STEP_MS = 250
#: how far behind its post a clock line's value reads when Spark lists the inputs before the
#: wake directory (module docstring)
LISTING_MARGIN_MS = 500


def clock_line(watermark_ms: int) -> str:
    """The line that carries the clock's watermark to every shard."""
    return f"{CLOCK_LINE} {int(watermark_ms)}"


class ExpirationReaper:
    """The driver's clock thread for one query (module docstring).

    ``clock``: the idle bookkeeping; None with processing-time deadlines, where a tick only
    asks for a micro-batch.  ``pending``: every shard's pending count as the checkpoint left
    it.  ``now``: seconds since the epoch (tests drive it).
    """

    def __init__(
        self,
        wake_root: str,
        interval_ms: int,
        *,
        clock: ClockWatermark | None,
        pending: Mapping[int, int] | None = None,
        storage: Storage | None = None,
        now: Callable[[], float] = time.time,
        recorder: ClockRecorder | None = None,
    ) -> None:
        #: does Spark say its last trigger found nothing to read, and none runs now?  The
        #: clock's run begins then, or with the first micro-batch
        self.quiet: Callable[[], bool] = lambda: False
        #: does Spark ask the wake directory for offsets before every input?  None: unknown
        self.listed_first: Callable[[], bool | None] = lambda: None
        self._margin_ms: int | None = None  # 0 or LISTING_MARGIN_MS, once Spark told
        self.wake = Wake(wake_root, storage)  # the directory's files are the wake's
        self.interval_ms = max(int(interval_ms), 1)
        self.clock = clock
        self.now = now
        #: what each shard held after its last call: pending operations, buffered events
        self.waiting: dict[int, int] = {int(s): int(n) for s, n in (pending or {}).items()}
        self.batch_times: dict[int, int] = {}  # the last micro-batches' times (ms), by id
        self.posted: list[int] = []  # the values posted, in order (figures, tests)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._paused = 0
        self._thread: threading.Thread | None = None
        self._last_tick_ms: int | None = None
        self.recorder = recorder
        self._run_ms: int | None = None  # when this run's reaper started (the processing clock's)

    # -- the control plane's side ------------------------------------------------------------

    def observe(
        self,
        calls: pa.Table,
        batch_id: int,
        known: Mapping[str, int | None] | None = None,
        *,
        held: Mapping[str, int] | None = None,
    ) -> None:
        """Micro-batch ``batch_id``'s metrics rows; ``known``: each input's watermark as the
        sink keeps it; ``held``: the Kafka inputs' watermarks per partition, which replace
        their largest event times (a partition behind holds the clock too)."""
        if calls.num_rows == 0:
            return
        batch_time = pc.max(calls.column(ms_column("batch_time"))).as_py()
        proposed = {source: pc.max(calls.column(c)).as_py() for source, c in PROPOSED_WATERMARKS.items()}
        if held:
            known = {**(known or {}), **held}
            proposed = {s: held.get(s, v) if v is not None else None for s, v in proposed.items()}
        held = pc.add(pc.fill_null(calls.column("pending"), 0), pc.fill_null(calls.column("buffered"), 0))
        with self._lock:
            for shard, n in zip(calls.column("shard").to_pylist(), held.to_pylist(), strict=True):
                self.waiting[int(shard)] = int(n)
            if batch_time is not None:
                self.batch_times[int(batch_id)] = int(batch_time)
                for old in [b for b in self.batch_times if b < batch_id - 1]:
                    del self.batch_times[old]
                if self.clock is not None:  # as of the trigger that started it
                    self.clock.observe(self._trigger_of(int(batch_time)), proposed, known)

    # -- the clock's side --------------------------------------------------------------------

    def tick(self) -> int | None:
        """Post the clock if something waits and the value is new; return what was posted."""
        now_ms = int(self.now() * 1000)
        with self._lock:
            if self._paused or not any(n > 0 for n in self.waiting.values()):
                return None
            if self.clock is None:  # processing-time deadlines: a micro-batch, at most one a tick
                value = now_ms if not self.posted or now_ms > self.posted[-1] else None
            else:
                if self._quiet():  # Spark's triggers read nothing: the run has begun
                    self.clock.begin(now_ms)
                # the micro-batch that reads this post admits every row written before it
                # (less the margin) before it applies the clock (module docstring)
                begun = self.clock.started_ms is not None
                # idleness as of the end of this tick's step, for the tick just before a
                # trigger that trigger (judged at the tick, an input would turn idle late)
                read_ms, idle_at = now_ms - self.margin_ms(), int(self._step_end(now_ms))
                value = self.clock.advance(now_ms, read_ms, idle_at_ms=idle_at) if begun else None
            before = self.batch_times.get(max(self.batch_times, default=0) - 1)
            on_clock = self._on_clock_ms()
        if value is not None:
            self._post(value, now_ms, cleanup_before=None if before is None else before - _MARGIN_MS)
            self.posted.append(value)
        self._record(on_clock, now_ms)
        return value

    def _trigger_of(self, batch_time_ms: int) -> int:
        """The trigger (a multiple of the interval) that started a micro-batch."""
        return batch_time_ms - batch_time_ms % self.interval_ms

    def _step_ms(self) -> float:
        """Ticks divide the trigger interval into steps of at most ``_STEP_MS``."""
        return self.interval_ms / -(-self.interval_ms // _STEP_MS)

    def _step_end(self, now_ms: float) -> float:
        """The end of the step ``now_ms`` is in."""
        step = self._step_ms()
        return (now_ms // step + 1) * step

    def _on_clock_ms(self) -> int | None:
        """``ClockRecord.on_clock_ms``."""
        return self._run_ms if self.clock is None else self.clock.all_idle_from_ms()

    def _record(self, on_clock_ms: int | None, now_ms: int) -> None:
        """Tell the checkpoint's readers how the clock goes (``clock_record``)."""
        if self.recorder is None:
            return
        if self.clock is None:
            lag, idle = 0, 0
        else:
            lag = self.margin_ms() + self.clock.largest_delay_ms
            idle = self.clock.idle_timeout_ms
        self.recorder.note(lag_ms=lag, idle_timeout_ms=idle, on_clock_ms=on_clock_ms, now_ms=now_ms)

    def _post(self, value: int, now_ms: int, *, cleanup_before: int | None) -> None:
        stamp = max(now_ms, (self._last_tick_ms or -1) + 1)  # a new name: Spark reads a path once
        self._last_tick_ms = stamp
        self.wake.post_clock(clock_line(value), stamp, forget_before_ms=cleanup_before)

    def margin_ms(self) -> int:
        """0 once Spark says it lists the wake first, else ``LISTING_MARGIN_MS``."""
        if self._margin_ms is None:
            try:
                first = self.listed_first()
            except Exception:  # e.g. a Spark without the method: keep the margin
                first = False
            if first is not None:
                self._margin_ms = 0 if first else LISTING_MARGIN_MS
        return LISTING_MARGIN_MS if self._margin_ms is None else self._margin_ms

    def _quiet(self) -> bool:
        try:
            return bool(self.quiet())
        except Exception:  # e.g. the query is stopping: not begun yet
            return False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No posts inside (``process_all_available``: a post is new input to Spark)."""
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1

    # -- the thread --------------------------------------------------------------------------

    def start(self) -> ExpirationReaper:
        self._run_ms = int(self.now() * 1000)
        with self._lock:
            on_clock = self._on_clock_ms()
        self._record(on_clock, self._run_ms)  # this run's record before its first tick
        self._thread = threading.Thread(target=self._run, name="purgatory-reaper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (idempotent); nothing is posted after this returns."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopping.wait(self._until_next_s()):
            try:
                self.tick()
            except Exception:  # the next tick retries; never kill the query
                log.exception("the reaper could not post the clock")

    def _until_next_s(self) -> float:
        """Seconds to the next tick: a tenth of a step before the step's end, so one tick
        falls just before each of Spark's triggers; the steps between matter when
        micro-batches run back to back (the next reads a clock posted moments before it)."""
        now_ms = self.now() * 1000
        step = self._step_ms()
        due = self._step_end(now_ms) - step / 10
        if due <= now_ms:
            due += step
        return (due - now_ms) / 1000


def reaper_for(
    config: PurgatoryConfig,
    interval_ms: int | None,
    wake_root: str,
    *,
    pending: Mapping[int, int] | None = None,
    storage: Storage | None = None,
    now: Callable[[], float] = time.time,
    recorder: ClockRecorder | None = None,
) -> ExpirationReaper | None:
    """The reaper a query needs (not started), or None: only a ``processing-time`` query
    (``interval_ms``) with ``watermark.idle.timeout`` set or ``deadline.clock=processing``."""
    idle_ms = config.watermark_idle_timeout_ms
    processing = config.deadline_clock == "processing"
    if interval_ms is None or (idle_ms is None and not processing):
        return None

    clock = None
    if not processing:
        delays = config.input_delays_ms()
        clock = ClockWatermark(idle_ms, delays)  # type: ignore[arg-type]
    return ExpirationReaper(
        wake_root, interval_ms, clock=clock, pending=pending, storage=storage, now=now, recorder=recorder
    )
