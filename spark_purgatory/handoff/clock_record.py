"""The clock record: what a running query's clock will do, for the people watching it.

During a silence Spark's watermark stands still while the operator's clock runs on.  The
driver's reaper writes ``<checkpoint>/purgatory-clock`` (one small JSON document) whenever
that changes, and ``inspect.countdown`` counts from it:

* ``run``: the run lease's token of the query that wrote it;
* ``lag_ms``: how far behind the wall clock the operator's clock runs once every input is
  idle (0 on the processing clock);
* ``idle_timeout_ms``: ``watermark.idle.timeout`` (0 on the processing clock);
* ``on_clock_ms``: from when the clock follows the wall clock if no input sends another row;
* ``trigger_ms``: the query's trigger interval; ``written_ms``: when it was written.

It is rewritten only when a field changes (``on_clock_ms`` by a trigger interval or more).
The file is advice: the stream never reads it; without it a checkpoint reads as "no clock".

Example::

    recorder = ClockRecorder("/chk/purgatory-clock", Storage(), run="3f2a", trigger_ms=1_000)
    recorder.note(lag_ms=5_000, idle_timeout_ms=30_000, on_clock_ms=None, now_ms=0)  # written
    recorder.note(lag_ms=5_000, idle_timeout_ms=30_000, on_clock_ms=None, now_ms=9)  # unchanged
    read_clock_record("/chk").lag_ms      # 5000
"""

from __future__ import annotations

import dataclasses
import json
import logging

from ..checkpoint_paths import Checkpoint
from ..state.layout import read_json
from ..storage import Storage, write_whole

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ClockRecord:
    """``<checkpoint>/purgatory-clock`` (module docstring)."""

    run: str
    lag_ms: int
    idle_timeout_ms: int
    on_clock_ms: int | None
    trigger_ms: int
    written_ms: int

    @classmethod
    def parse(cls, document: dict | None) -> ClockRecord | None:
        """The record in ``document``, or None for anything else (a file cut short)."""
        if not isinstance(document, dict):
            return None
        try:
            on_clock = document.get("on_clock_ms")
            return cls(
                run=str(document["run"]),
                lag_ms=int(document["lag_ms"]),
                idle_timeout_ms=int(document["idle_timeout_ms"]),
                on_clock_ms=None if on_clock is None else int(on_clock),
                trigger_ms=int(document["trigger_ms"]),
                written_ms=int(document["written_ms"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


class ClockRecorder:
    """Writes one run's record when it changes (the reaper's thread)."""

    def __init__(self, path: str, storage: Storage, *, run: str, trigger_ms: int) -> None:
        self.path, self.storage, self.run, self.trigger_ms = path, storage, run, int(trigger_ms)
        self._written: ClockRecord | None = None

    @classmethod
    def under(cls, checkpoint: str, storage: Storage, *, run: str, trigger_ms: int) -> ClockRecorder:
        return cls(Checkpoint(checkpoint).clock_record, storage, run=run, trigger_ms=trigger_ms)

    def note(self, *, lag_ms: int, idle_timeout_ms: int, on_clock_ms: int | None, now_ms: int) -> bool:
        """Write the record if it says something new; True if written (a refused write is
        logged, never raised: the record is advice)."""
        last = self._written
        if (
            last is not None
            and (last.lag_ms, last.idle_timeout_ms) == (lag_ms, idle_timeout_ms)
            and (last.on_clock_ms is None) == (on_clock_ms is None)
            and (on_clock_ms is None or abs(on_clock_ms - last.on_clock_ms) < self.trigger_ms)  # type: ignore[operator]
        ):
            return False
        record = ClockRecord(
            self.run, int(lag_ms), int(idle_timeout_ms), on_clock_ms, self.trigger_ms, int(now_ms)
        )
        body = json.dumps(dataclasses.asdict(record)).encode()
        try:
            fs, path = self.storage.filesystem(self.path)
            write_whole(fs, path, lambda out: out.write(body))
        except OSError as error:
            log.warning("could not write the clock record %s: %s", self.path, error)
            return False
        self._written = record
        return True


def read_clock_record(checkpoint: str, storage: Storage | None = None) -> ClockRecord | None:
    """The checkpoint's clock record, None when there is none (or it cannot be read)."""
    fs, path = (storage or Storage()).filesystem(Checkpoint(checkpoint).clock_record)
    return ClockRecord.parse(read_json(fs, path))
