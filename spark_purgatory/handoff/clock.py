"""The operator's clock: where the watermark may go when inputs fall silent.

Spark's watermark moves only when rows arrive; Kafka's purgatory expires on the wall clock.
With ``watermark.idle.timeout`` set, this module decides how far the operator's watermark
may go *on the clock*:

* an input is **idle** once no micro-batch has moved its watermark for the idle timeout, in
  processing time; a run starts with every input active (``begin``), so a backlog waiting
  at the start is read before any input counts as idle;
* while no input is idle the clock says nothing (``None``);
* while some inputs are idle, the clock is the minimum of the active inputs' watermarks
  (Flink's ``withIdleness``);
* once **every** input is idle, the clock is the processing time up to which the inputs are
  read (``read_ms``) minus the largest input delay, so a row that reached its input within
  its delay is never ``late``, however long it waited to be read.

The value only grows (``advance``).

Example (delay 5 s, idle timeout 30 s, the run started at t = 0)::

    clock = ClockWatermark(30_000, {"operations": 5_000, "events": 5_000}, started_ms=0)
    clock.observe(10_000, {"operations": 100_000, "events": None})  # ops' rows, events silent
    clock.watermark(20_000)   # None: nobody idle yet
    clock.watermark(31_000)   # 100_000: events idle since 30 s, the operations' watermark
    clock.watermark(41_000)   # 36_000: both idle (ops since 40 s): the clock minus 5 s
    clock.watermark(41_000, read_ms=40_000)   # 35_000: read through 40 s only
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass
class InputActivity:
    """When (processing ms) a micro-batch last brought an input rows, and its watermark."""

    last_rows_ms: int | None = None
    watermark: int | None = None


class ClockWatermark:
    """Idle bookkeeping per input, and the clock's watermark from it (module docstring).

    ``started_ms``: when this run started (processing ms); None: at ``begin`` or the first
    ``observe``.
    """

    def __init__(
        self, idle_timeout_ms: int, delays_ms: Mapping[str, int], *, started_ms: int | None = None
    ) -> None:
        if idle_timeout_ms < 0:
            raise ValueError(f"the idle timeout must be >= 0 ms, got {idle_timeout_ms}")
        self.idle_timeout_ms = int(idle_timeout_ms)
        self.delays_ms = {source: int(delay) for source, delay in delays_ms.items()}
        self.inputs = {source: InputActivity() for source in self.delays_ms}
        self.started_ms: int | None = None
        #: the largest value handed out by ``advance``: the clock never moves back
        self.posted: int | None = None
        if started_ms is not None:
            self.begin(started_ms)

    def begin(self, started_ms: int) -> None:
        """The run has started (a second call changes nothing)."""
        if self.started_ms is not None:
            return
        self.started_ms = int(started_ms)
        for seen in self.inputs.values():
            if seen.last_rows_ms is None:
                seen.last_rows_ms = self.started_ms

    def observe(
        self,
        batch_time_ms: int,
        proposed: Mapping[str, int | None],
        known: Mapping[str, int | None] | None = None,
    ) -> None:
        """A micro-batch ran at ``batch_time_ms``; ``proposed``: the watermark each input's
        rows propose (None: no row); ``known``: each input's watermark as the sink keeps it."""
        self.begin(batch_time_ms)
        for source, value in (known or {}).items():
            self._raise(source, value)
        for source, value in proposed.items():
            if value is None or source not in self.inputs:
                continue
            seen = self.inputs[source]
            seen.last_rows_ms = max(seen.last_rows_ms or 0, int(batch_time_ms))
            self._raise(source, value)

    def _raise(self, source: str, value: int | None) -> None:
        seen = self.inputs.get(source)
        if seen is not None and value is not None:
            seen.watermark = int(value) if seen.watermark is None else max(seen.watermark, int(value))

    def idle(self, now_ms: int) -> set[str]:
        """The inputs that have sent nothing for the idle timeout as of ``now_ms``."""
        return {
            source
            for source, seen in self.inputs.items()
            if seen.last_rows_ms is not None and now_ms - seen.last_rows_ms >= self.idle_timeout_ms
        }

    @property
    def largest_delay_ms(self) -> int:
        """How far behind the processing time the clock runs once every input is idle."""
        return max(self.delays_ms.values(), default=0)

    def all_idle_from_ms(self) -> int | None:
        """When (processing ms) every input is idle if none sends another row (``idle``'s
        rule); None before the run has begun."""
        last = [seen.last_rows_ms for seen in self.inputs.values()]
        if self.started_ms is None or None in last:
            return None
        return max(last) + self.idle_timeout_ms  # type: ignore[type-var]

    def watermark(
        self, now_ms: int, read_ms: int | None = None, *, idle_at_ms: int | None = None
    ) -> int | None:
        """The clock's watermark at ``now_ms`` (module docstring); ``read_ms``: the time up to
        which the inputs have been read; ``idle_at_ms``: the moment idleness is judged as of
        (``now_ms`` if None)."""
        idle = self.idle(now_ms if idle_at_ms is None else idle_at_ms)
        if not idle:
            return None
        active = [seen.watermark for source, seen in self.inputs.items() if source not in idle]
        if active:
            return None if None in active else min(active)  # type: ignore[type-var]
        through = int(now_ms) if read_ms is None else min(int(now_ms), int(read_ms))
        return through - self.largest_delay_ms

    def advance(
        self, now_ms: int, read_ms: int | None = None, *, idle_at_ms: int | None = None
    ) -> int | None:
        """``watermark`` if it is past every value handed out before, else None."""
        value = self.watermark(now_ms, read_ms, idle_at_ms=idle_at_ms)
        if value is None or (self.posted is not None and value <= self.posted):
            return None
        self.posted = value
        return value


def on_arrival(
    operations: pd.DataFrame, events: pd.DataFrame, claims: pd.DataFrame | None, arrival_ms: int
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """``deadline.clock=processing``: a shard's validated rows as of their arrival.

    Every row's time becomes ``arrival_ms`` (Spark's batch timestamp: the same in every shard
    and on a replay), an operation's deadline its arrival plus its timeout; the shard then
    runs at ``arrival_ms``, so nothing is ``late`` and an operation expires in the first
    micro-batch that starts at or after its deadline.  The frames are copied."""
    arrival = np.int64(arrival_ms)

    def rebased(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        frame["deadline"] = frame["deadline"].to_numpy(np.int64) - frame["ts"].to_numpy(np.int64) + arrival
        frame["ts"] = np.full(len(frame), arrival, dtype=np.int64)
        return frame

    events = events.copy()
    events["ts"] = np.full(len(events), arrival, dtype=np.int64)
    return rebased(operations), events, None if claims is None else rebased(claims)
