"""The end of input: the end mark every shard applies, and the checkpoint's record of it.

``Wake.end`` writes the end mark, which routing sends to *every* shard group: the shard runs
its micro-batch at ``end_watermark_ms``, so everything pending expires at its deadline and
every buffered event is reported (``docs/end-of-input.md``).

Invariant: a checkpoint whose end is recorded (``<checkpoint>/purgatory-ended``) never runs
again; one whose end is declared but not recorded is completed by the next ``start``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from ..checkpoint_paths import Checkpoint
from ..contract import MAX_TS_MS
from ..storage import Storage, read_bytes, write_whole
from .wake import Wake


def end_watermark_ms(max_timeout_ms: int, tick_ms: int, latest_deadline: int | None = None) -> int:
    """A wheel tick past every deadline, those a shard holds (``latest_deadline``) and any a
    valid operation can have; still a valid timestamp, so the metrics row that carries it is."""
    latest = MAX_TS_MS + int(max_timeout_ms)
    if latest_deadline is not None:
        latest = max(latest, int(latest_deadline))
    return latest + int(tick_ms)


class InputEndedError(RuntimeError):
    """``start`` on a checkpoint whose input ended: new input needs a new checkpoint."""


class EndOfInput:
    """A checkpoint's end of input: declared (the end mark), then recorded once the run that
    applied it committed its output (``PurgatoryQuery.end_input``); a crash before the record
    leaves a declared, unrecorded checkpoint, which the next ``start`` completes."""

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
        applied the end (None if no driver saw it), and ``ended_at``."""
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
