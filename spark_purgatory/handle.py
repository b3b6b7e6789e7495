"""The handle ``start`` returns: ``PurgatoryQuery``, a running purgatory and its figures.

Invariant: after ``stop()`` returns, every row a committed micro-batch produced is in the
tables, and the checkpoint's run lease is given back.  A failure is raised with its cause in
the first line (``faults.PermanentFault`` when no restart brings the resource back).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .contract import COUNTS
from .delta.accumulator import RecordAccumulator, TableWriter
from .delta.sink import PurgatorySink
from .driver_step import STOPPING, DriverStep
from .handoff.end_of_input import EndOfInput
from .handoff.reaper import ExpirationReaper
from .runtime.spark_logs import quiet_refusal
from .state.layout import LEASE_RENEW_S

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("spark_purgatory.query")  # the handle logs as the query it runs

#: runs ``await_termination`` may add after an ``available-now`` run that ended on relays
_WAKE_RUNS = 3


class PurgatoryQuery:
    """A running purgatory: the ``StreamingQuery``, the driver's half of its micro-batches, and
    its figures.

    Attributes:
        query: Spark's ``StreamingQuery`` (``id``, ``status``, ``exception()`` ...).
        step: the ``DriverStep`` that takes each micro-batch: its output (``sink``), then
            its control plane (``step.control``).
        sink: the ``PurgatorySink`` that writes each micro-batch's output (``accumulator``,
            ``writer``).
        totals: rows and commits so far, counted in this process: ``batches``,
            ``completed``, ``expired``, ``cancelled``, ``unmatched``, ``rejected``,
            ``warned`` (warnings), ``commits``; and
            ``pending``, the operations not yet resolved as of the last micro-batch.
    """

    def __init__(
        self,
        query: StreamingQuery,
        step: DriverStep,
        totals: _Totals,
        *,
        linger: bool = True,
        on_linger: Callable[[list[dict]], None] | None = None,
        rerun: Callable[[], StreamingQuery] | None = None,
        end: EndOfInput | None = None,
        end_of_input: bool = False,
        run_available_now: Callable[[], StreamingQuery] | None = None,
        lease: Any = None,
        reaper: ExpirationReaper | None = None,
        stop_timeout_ms: int = 60_000,
        permanent: Callable[[], BaseException | None] | None = None,
        release: Callable[[], None] | None = None,
    ) -> None:
        self.query = query
        self._release = release  # once stopped: the driver's reference to the sink's committer
        self._permanent = permanent  # after a failure: the error naming what is gone, or None
        if reaper is not None:  # its run begins with a micro-batch, or when Spark finds no input
            reaper.quiet = lambda: _waiting_for_data(self.query.status)
            reaper.listed_first = lambda: listed_first(self.query, reaper.wake.root)
        self._reaper = reaper.start() if reaper is not None else None  # posts the clock (reaper)
        self._rerun = rerun
        self._end = end
        self._end_of_input = end_of_input
        self._run_available_now = run_available_now
        self._lease = lease  # the checkpoint's ``state.layout.RunLease``, given back by ``stop``
        self._interrupted = False
        self._stop_timeout_s = stop_timeout_ms / 1000
        self._signalled: int | None = None  # the signal ``stop_on_signals`` noted
        self._signal_watch: threading.Thread | None = None
        self.step = step
        self._counted = totals
        self._on_linger = on_linger
        self._stopping = threading.Event()
        self._closed = False
        self._timer: threading.Thread | None = None
        if lease is not None:  # renewed while the query runs: a driver gone lets it go stale
            threading.Thread(target=self._renew_lease, name="purgatory-lease", daemon=True).start()
        if linger:
            self._timer = threading.Thread(target=self._linger, name="purgatory-linger", daemon=True)
            self._timer.start()

    # -- figures -----------------------------------------------------------------------------

    @property
    def sink(self) -> PurgatorySink:
        return self.step.sink

    @property
    def accumulator(self) -> RecordAccumulator:
        return self.sink.accumulator

    @property
    def writer(self) -> TableWriter:
        return self.sink.writer

    @property
    def totals(self) -> dict[str, int]:
        return self._counted.totals

    @property
    def pending(self) -> int:
        """Operations not yet resolved, as of the last micro-batch, each counted once."""
        return sum(self.step.control.pending.values())

    @property
    def is_active(self) -> bool:
        return bool(self.query.isActive)

    def exception(self) -> BaseException | None:
        """Why the run failed (Spark's ``StreamingQuery.exception()``), None while it runs or
        when it stopped cleanly.  A micro-batch refused because a stop was asked ran nothing
        and runs again at the next start: no failure."""
        error = self.query.exception()
        return None if error is None or self._refused(error) else error

    def _refused(self, error: BaseException) -> bool:
        """Is ``error`` the refusal of a micro-batch triggered after this handle's stop?"""
        return self._stopped() and STOPPING in str(error)

    @property
    def clock_margin_ms(self) -> int:
        """How far behind its post the operator's clock reads on a quiet stream, 0 without a
        clock."""
        return self._reaper.margin_ms() if self._reaper is not None else 0

    @property
    def history(self) -> list[dict]:
        """Per-micro-batch figures from the query's recent progress (``observe`` metrics)."""
        from .spark.metrics import progress_figures

        pending_by_shard = dict(self.step.control.pending_at_start)
        return [progress_figures(p, pending_by_shard) for p in self.query.recentProgress]

    @property
    def last_progress(self) -> dict | None:
        """The last micro-batch's figures (None before the first)."""
        history = self.history
        return history[-1] if history else None

    # -- running and stopping ------------------------------------------------------------------

    def await_termination(self, timeout: float | None = None) -> bool | None:
        """Wait for the query to end (``available-now``: when the input present is done).

        An ``available-now`` run that ends with relays the cross-shard group has not received
        is followed by one more run, so the relayed completions come out before this returns
        (``query`` is then the new run).  Started with ``end_of_input=True``, the input is then
        ended (``end_input``).
        """
        ended = self._await_runs(timeout)
        if ended is not False and self._end_of_input and not self._stopped():
            self.end_input()
        return ended

    def _await_runs(self, timeout: float | None) -> bool | None:
        """Wait for this run, and for the runs that relays owed then (``await_termination``)."""
        ended = self._await(timeout)
        for _ in range(_WAKE_RUNS):
            if ended is False or not self._owes_wake():
                break
            log.info("relays or registry verdicts a shard has not received yet: one more run")
            self.query = self._rerun()  # type: ignore[misc]
            ended = self._await(timeout)
        return ended

    def end_input(self) -> dict | None:
        """End the input: every operation still pending resolves, and the checkpoint is closed.

        The input present is processed first, then one ``available-now`` run moves each shard
        past every deadline: what is pending expires at its deadline and every buffered event
        that counted for nothing goes to ``unmatched_events``; a row read then or later is
        rejected as ``late``.  The output is committed, then the end is recorded, and
        ``start`` refuses the checkpoint from then on (``docs/end-of-input.md``).  After a
        crash, the next ``available-now`` ``start`` finishes the end.

        Returns:
            The record: ``batch_id`` (the micro-batch that applied the end) and ``ended_at``;
            the existing record when the input had ended already; None when the query was
            stopped before the end was recorded (run again to finish it).
        """
        if self._end is None or self._run_available_now is None:
            raise RuntimeError("end_input() needs a query from spark_purgatory.start()")
        recorded = self._end.recorded()
        if recorded is not None:
            return recorded
        if self._rerun is not None:  # available-now: the input present, to its end
            self._await_runs(None)
        elif self.query.isActive:  # processing-time: caught up, then stopped
            self._stop_reaper()
            self.query.processAllAvailable()
            self.query.stop()
        if self._stopped() or self.query.exception() is not None:
            return None
        self._end.declare()
        log.info("end of input declared: one more run moves every shard past every deadline")
        self._rerun = self._run_available_now
        self.query = self._rerun()
        self._await_runs(None)
        if self._stopped():
            return None
        self.totals["commits"] += len(self.step.close())  # committed before it is recorded
        recorded = self._end.record()
        log.info("input ended after micro-batch %s", recorded["batch_id"])
        return recorded

    def _stopped(self) -> bool:
        return self._closed or self._interrupted

    def _await(self, timeout: float | None) -> bool | None:
        """Spark's wait; a failed micro-batch is re-raised with its first cause in the first line."""
        from pyspark.errors import StreamingQueryException

        from .spark.errors import micro_batch_error

        try:
            if timeout is None:
                return self.query.awaitTermination()
            return self.query.awaitTermination(timeout)
        except StreamingQueryException as error:
            if self._refused(error):
                return True
            raise self._gone() or micro_batch_error(error) from error

    def _gone(self) -> BaseException | None:
        """After a failure: the error naming a resource that is gone for good, else None."""
        if self._permanent is None:
            return None
        try:
            return self._permanent()
        except Exception:  # noqa: BLE001 - asking must not hide the failure itself
            log.warning("could not ask what the query depends on", exc_info=True)
            return None

    def _owes_wake(self) -> bool:
        """Did this run end with relays that no later call of the cross-shard group received?"""
        wake = self.step.control.wake
        return (
            self._rerun is not None
            and not self._stopped()
            and self.query.exception() is None
            and wake is not None
            and wake.owed is not None
        )

    def interrupt(self) -> None:
        """Stop the running query between micro-batches, without flushing: a waiting
        ``await_termination`` returns, with no further run; ``stop()`` then flushes.  From a
        signal handler use ``stop_on_signals`` instead (no Py4J call may run in a handler)."""
        self._interrupted = True
        self._stop_reaper()
        self._stop_between_batches()

    def stop_on_signals(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> PurgatoryQuery:
        """On the first of ``signals``, ``interrupt`` the query.  A second signal gets the
        handler that was there before (Ctrl-C twice: a ``KeyboardInterrupt``).  Call it from
        the main thread; returns the handle::

            with start(...).stop_on_signals() as purgatory:
                purgatory.await_termination()      # returns on SIGTERM / Ctrl-C
            # stopped and flushed here: exit 0
        """
        previous = {signum: signal.getsignal(signum) for signum in signals}

        def note(signum: int, _frame: Any) -> None:
            # nothing else here: the main thread may be inside a Py4J call or a write
            self._signalled = signum
            for other, handler in previous.items():
                signal.signal(other, handler)

        for signum in signals:
            signal.signal(signum, note)
        if self._signal_watch is None:
            watch = threading.Thread(target=self._watch_signals, name="purgatory-signals", daemon=True)
            self._signal_watch = watch
            watch.start()
        return self

    @property
    def signalled(self) -> int | None:
        """The signal that stopped the query (``stop_on_signals``), None if none did."""
        return self._signalled

    def _watch_signals(self) -> None:
        while not self._stopping.wait(0.2):
            if self._signalled is not None:
                log.info("signal %s: stopping the query between micro-batches", self._signalled)
                try:
                    self.interrupt()
                except Exception:  # noqa: BLE001 - the query ended meanwhile; stop() flushes all the same
                    log.exception("stopping on signal %s", self._signalled)
                return

    def _stop_between_batches(self) -> None:
        """Let the micro-batch under way finish (up to ``query.stop.timeout.ms``), refuse the next,
        then stop Spark's query."""
        if not self.query.isActive:
            return
        quiet_refusal(self.query)  # a refused batch is no error
        if not self.step.hold(self._stop_timeout_s):
            log.warning(
                "a micro-batch still runs after query.stop.timeout.ms: stopping it "
                "(the next start runs it again)"
            )
        self.query.stop()

    def process_all_available(self) -> None:
        """Block until the input present now has been processed (tests, notebooks); the
        reaper's clock posts wait meanwhile (each would be new input)."""
        if self._reaper is None:
            self.query.processAllAvailable()
            return
        with self._reaper.paused():
            self.query.processAllAvailable()

    def stop(self) -> list[dict]:
        """Stop the query between micro-batches and flush the accumulator (Kafka's
        ``close()``); return the commits.

        Safe at any time: the checkpoint and the staged rows survive.  A second call does
        nothing and returns ``[]``.
        """
        if self._closed:
            return []
        self._closed = True
        self._stop_reaper()
        self._stop_between_batches()
        self._stopping.set()
        if self._timer is not None:
            self._timer.join()
        try:
            flushed = self.step.close()
        except Exception as error:  # a bucket gone, credentials refused: said in the first line
            gone = self._gone()
            if gone is not None:
                raise gone from error
            raise
        finally:  # a flush that fails (a store gone) still gives the checkpoint back
            if self._lease is not None:
                self._lease.release()
            if self._release is not None:
                self._release()
        self.totals["commits"] += len(flushed)
        return flushed

    def _stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.stop()

    def __enter__(self) -> PurgatoryQuery:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def _renew_lease(self) -> None:
        while not self._stopping.wait(LEASE_RENEW_S):
            try:
                renewed = self._lease.renew()
            except Exception:  # noqa: BLE001 - a store's hiccup: the next renewal tries again
                log.warning("could not renew the checkpoint's run lease", exc_info=True)
                continue
            if not renewed:  # another query took the checkpoint: two writers must not run
                log.error("another query took the checkpoint's run lease: stopping this one")
                self.interrupt()
                return

    def _linger(self) -> None:
        """Kafka's sender: lingered rows go out even when the input is quiet."""
        period = max(0.2, min(1.0, self.sink.accumulator.linger_ms / 4000))
        while not self._stopping.wait(period):
            if not self.step.linger_due():
                continue
            if not self.query.isActive:
                break
            try:
                committed = self.step.drain_lingering()
            except Exception:  # the next micro-batch or stop() retries; never kill the query
                log.exception("linger drain failed")
                continue
            self.totals["commits"] += len(committed)
            if committed and self._on_linger:
                self._on_linger(committed)


def listed_first(query: StreamingQuery, directory: str) -> bool | None:
    """Does Spark ask ``directory`` (a file source of ``query``) for offsets before any other
    source?  None while Spark's map of sources is not built yet, False where the session does
    not show it (Spark Connect), so a caller keeps its margin."""
    jsq = getattr(query, "_jsq", None)
    if jsq is None:
        return False
    sources = jsq.streamingQuery().uniqueSources()
    if sources is None or sources.isEmpty():
        return None
    first = str(sources.toSeq().apply(0)._1().toString())  # FileStreamSource[file:/chk/purgatory-wake]
    inner = first.partition("[")[2].rstrip("]").rstrip("/")
    return inner.endswith(directory.split("://", 1)[-1].rstrip("/"))


def _waiting_for_data(status: dict) -> bool:
    """Did the query's last trigger find no new input, and is no trigger running now?"""
    waiting = status.get("message") in ("Waiting for next trigger", "Waiting for data to arrive")
    return waiting and not status.get("isDataAvailable") and not status.get("isTriggerActive")


class _Totals:
    """Adds each micro-batch's figures up, then calls the user's hook.  Picklable: Spark
    Connect pickles the driver's step to run it in the server."""

    def __init__(self, then: Callable[[dict], None] | None, *, pending: int = 0) -> None:
        self.totals = {"batches": 0, **dict.fromkeys(COUNTS, 0), "commits": 0, "pending": pending}
        self.then = then

    def __call__(self, figures: dict) -> None:
        self.totals["batches"] += 1
        self.totals["pending"] = figures["pending"]  # a gauge: every shard's, as of this batch
        for key in COUNTS:
            self.totals[key] += figures[key]
        self.totals["commits"] += len(figures["committed"])
        if self.then:
            self.then(figures)
