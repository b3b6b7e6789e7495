"""The end of input: the end mark every shard applies, and the checkpoint's record of it.

**The end of input** rides the same directory (``docs/end-of-input.md``): ``Wake.end``
writes the end mark ``end.txt``, whose line ``routing.route_wake`` sends to *every* shard
group, the cross-shard one included.  A shard that receives it processes its micro-batch at
``end_watermark_ms``, past every deadline it holds and any a valid operation can have, so
everything pending expires at its deadline and every buffered event is reported; the engine
keeps that watermark (it never moves back), so a row that reaches the shard afterwards is
``late``.  ``EndOfInput`` keeps the checkpoint's side: the declaration (the end mark) and,
once the run that applied it is done and its output committed, the record
``<checkpoint>/purgatory-ended`` on which ``start`` refuses to run again.

Invariant: a checkpoint whose end is recorded never runs again (``EndOfInput.check_open``);
one whose end is declared but not recorded is completed by the next ``start``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from ..checkpoint_paths import Checkpoint
from ..contract import MAX_TS_MS
from ..storage import Storage, read_bytes, write_whole
from .wake import Wake, is_end_watermark

__all__ = ["EndOfInput", "InputEndedError", "end_watermark_ms", "is_end_watermark"]


def end_watermark_ms(max_timeout_ms: int, tick_ms: int, latest_deadline: int | None = None) -> int:
    """The watermark a shard moves to at the end of input: a wheel tick past every deadline,
    those it holds (``latest_deadline``) and any a valid operation can have (event times end
    before ``contract.MAX_TS_MS``; timeouts at ``purgatory.max.timeout.ms``).  Still a valid
    timestamp (year 2200 and a few days), so the metrics row that carries it is too."""
    latest = MAX_TS_MS + int(max_timeout_ms)
    if latest_deadline is not None:
        latest = max(latest, int(latest_deadline))
    return latest + int(tick_ms)


class InputEndedError(RuntimeError):
    """``start`` on a checkpoint whose input ended: new input needs a new checkpoint."""


class EndOfInput:
    """A checkpoint's end of input: declared (the end mark in its wake directory), then
    recorded (``<checkpoint>/purgatory-ended``, a small JSON file written whole).

    ``PurgatoryQuery.end_input`` declares, runs the micro-batch that applies it (and any the
    relays then owe), commits the output, and only then records; a crash anywhere before the
    record leaves a declared, unrecorded checkpoint, which the next ``start`` completes.

    Example::

        end = EndOfInput("/chk")
        end.declare()              # the end mark: the next micro-batch ends every shard
        ...                        # an available-now run applies it
        end.record()               # {"batch_id": 12, "ended_at": "..."}: 12 applied it
        end.check_open()           # raises InputEndedError from now on
    """

    def __init__(self, checkpoint: str, storage: Storage | None = None) -> None:
        self.checkpoint = checkpoint
        self.storage = storage or Storage()
        self.wake = Wake.under(checkpoint, self.storage)

    def declare(self) -> None:
        """Post the end mark, once (after a crash it is there already, maybe applied)."""
        if not self.declared():
            self.wake.end()

    def declared(self) -> bool:
        return self.wake.end_posted()

    def record(self, *, now: dt.datetime | None = None) -> dict[str, Any]:
        """Record that the input ended; return the record: ``batch_id``, the micro-batch that
        applied the end (``Wake.end_batch``; None if no driver saw it, e.g. the end ran over
        Spark Connect in a server that could not write it), and ``ended_at``."""
        batch_id = self.wake.end_batch()
        ended_at = (now or dt.datetime.now(dt.timezone.utc)).isoformat(timespec="seconds")
        body = {"batch_id": batch_id, "ended_at": ended_at}
        fs, path = self.storage.filesystem(Checkpoint(self.checkpoint).end_record)
        write_whole(fs, path, lambda out: out.write(json.dumps(body).encode()))
        return body

    def recorded(self) -> dict[str, Any] | None:
        """The record, or None while the input has not ended."""
        fs, path = self.storage.filesystem(Checkpoint(self.checkpoint).end_record)
        try:
            return json.loads(read_bytes(fs, path))
        except FileNotFoundError:
            return None

    def check_open(self) -> None:
        """Raise ``InputEndedError`` (one line, saying what to do) if the input ended."""
        ended = self.recorded()
        if ended is not None:
            raise InputEndedError(
                f"the input of checkpoint {self.checkpoint} ended (after micro-batch "
                f"{ended.get('batch_id')}, at {ended.get('ended_at')}): start new input on a new "
                "checkpoint; rows reaching this one would only be rejected as late"
            )
