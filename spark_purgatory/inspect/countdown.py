"""What an operation's time left counts from: the operator's clock, not only Spark's watermark.

Spark's watermark moves with rows; the operator's clock (``watermark.idle.timeout``) moves on
during a silence, which is exactly when a desk asks "what breaches in the next two minutes":

* **a running query whose clock follows the wall clock** (every input idle): the watermark
  now is the wall clock less the clock's lag;
* **a running query whose inputs still send rows, or one just (re)started**: time left is
  the sooner of two futures: rows keep the watermark moving at the wall clock's pace, or the
  inputs fall silent and the clock takes over at ``on_clock_ms``.  A desk is told of a
  breach that may come, never a minute after it came;
* **a stopped query**, one without the clock, or an earlier micro-batch asked for: the
  watermark of the micro-batch read;
* **a watermark the caller gives**: time left counts from it alone.

The figures are within about one trigger interval of the truth, plus the micro-batch's time
and ``accumulator.linger.ms`` (docs/operating.md).

Example::

    countdown = Countdown(now_ms=100_000, lag_ms=5_000, on_clock_ms=90_000)
    countdown.watermark(60_000)                       # 95_000: the wall clock less the lag
    countdown.time_left(np.array([97_000]), 60_000)   # [2_000]
    Countdown(floor_ms=60_000).time_left(np.array([97_000]), 50_000)   # [37_000]: stopped
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time

import numpy as np

from ..handoff.clock_record import read_clock_record
from ..state.layout import RunLease
from ..storage import Storage


@dataclasses.dataclass(frozen=True)
class Countdown:
    """How to count an operation's time left (module docstring).

    Args:
        fixed_ms: a watermark the caller gave: time left counts from it alone.
        floor_ms: Spark's watermark of the micro-batch read (a shard the micro-batch did not
            call keeps an older watermark of its own).
        now_ms: the wall clock when asked, for a running query with the clock; None: time
            stands still (the watermark of the micro-batch read).
        lag_ms: how far behind the wall clock the clock runs once it follows it.
        on_clock_ms: from when the clock follows the wall clock if no input sends another row.
    """

    fixed_ms: int | None = None
    floor_ms: int | None = None
    now_ms: int | None = None
    lag_ms: int = 0
    on_clock_ms: int | None = None

    def running(self) -> bool:
        """Does the clock move time left on while nothing arrives?"""
        return self.fixed_ms is None and self.now_ms is not None and self.on_clock_ms is not None

    def watermark(self, shard_ms: int) -> int:
        """The operator's watermark now, for a shard whose state says ``shard_ms``."""
        if self.fixed_ms is not None:
            return self.fixed_ms
        wm = shard_ms if self.floor_ms is None else max(shard_ms, self.floor_ms)
        if self.running() and self.on_clock_ms <= self.now_ms:  # type: ignore[operator]
            return max(wm, self.now_ms - self.lag_ms)  # type: ignore[operator]
        return wm

    def time_left(self, deadline: np.ndarray, shard_ms: int) -> np.ndarray:
        """Each deadline's time left (ms; negative: overdue), the sooner of the watermark's
        and, while the clock may take over, the clock's (module docstring)."""
        deadline = np.asarray(deadline, dtype=np.int64)
        left = deadline - self.watermark(shard_ms)
        if self.running():
            on_clock = np.maximum(deadline + self.lag_ms, self.on_clock_ms)  # type: ignore[arg-type]
            left = np.minimum(left, on_clock - self.now_ms)  # type: ignore[operator]
        return left

    def summary(self) -> str:
        """How time left counts, in a line (``spark-purgatory status``)."""
        if self.fixed_ms is not None:
            return f"from the watermark given, {iso_text(self.fixed_ms)}"
        if not self.running():
            return "stands still until rows or a run move the watermark (no running query with the clock)"
        behind = f"{self.lag_ms / 1000:g} s behind the wall clock"
        at = iso_text(self.on_clock_ms)
        if self.on_clock_ms <= self.now_ms:  # type: ignore[operator]
            return f"runs on the operator's clock, {behind} (since {at})"
        return f"the operator's clock takes over at {at} if the inputs stay silent, {behind}"


def iso_text(ms: int | None) -> str | None:
    """Epoch ms as ISO-8601 UTC text (None stays None)."""
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat()


def countdown_of(
    checkpoint: str,
    storage: Storage,
    *,
    floor_ms: int | None,
    latest: bool,
    now_ms: int | None = None,
) -> Countdown:
    """How time left counts on ``checkpoint`` now (module docstring): ``floor_ms`` is Spark's
    watermark of the micro-batch read; ``latest``: is it the last committed one?"""
    if not latest:
        return Countdown(floor_ms=floor_ms)
    lease = RunLease(checkpoint, storage).holder()
    record = read_clock_record(checkpoint, storage) if lease is not None else None
    if lease is None or record is None or record.run != lease.get("token"):
        return Countdown(floor_ms=floor_ms)  # stopped, no clock, or not this run's clock yet
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    on_clock = record.on_clock_ms
    if on_clock is None:  # the run has not begun: its inputs count as active until it does
        on_clock = max(now, record.written_ms) + record.idle_timeout_ms
    return Countdown(floor_ms=floor_ms, now_ms=now, lag_ms=record.lag_ms, on_clock_ms=on_clock)
