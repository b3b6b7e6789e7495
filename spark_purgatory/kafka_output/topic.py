"""The driver's side of the output topic: which recorded micro-batches it lacks, and the one
Spark task that sends them (``producer.send``).

The sink calls ``catch_up`` after it records a micro-batch and before any drain deletes the
staged files a send reads.  On a topic's first ``open`` (no marker yet) the marker is
committed at the checkpoint's last recorded micro-batch: the topic gets the outcomes from
the next one on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from ..contract import OUTCOMES
from ..storage import Storage
from .producer import SENT, SENT_DDL, Send, TopicSettings, committed_batch, mark, send
from .records import WHOLE_TABLES

log = logging.getLogger(__name__)

#: runs ``fn`` on each item, one task each (``delta.sender.TaskRunner``)
Tasks = Callable[[Callable[[Any], pa.Table], Sequence[Any], pa.Schema, str], pa.Table]
#: each recorded micro-batch after a given one, with its staged files of given tables (URIs)
StagedFiles = Callable[[int, Sequence[str]], list[tuple[int, list[tuple[str, str]]]]]


class TopicOutput:
    """The outcomes of ``settings.statuses`` onto ``settings.topic``, exactly once for
    read_committed consumers."""

    def __init__(self, settings: TopicSettings, storage: Storage) -> None:
        self.settings = settings
        self.storage = storage
        #: the last micro-batch the topic has had, as far as this driver knows (None: ask Kafka)
        self.sent_through: int | None = None

    @property
    def tables(self) -> list[str]:
        """The tables whose staged files hold rows for the topic."""
        statuses = set(self.settings.statuses)
        wanted = [OUTCOMES.name] if statuses - set(WHOLE_TABLES) else []
        return wanted + [table.name for status, table in WHOLE_TABLES.items() if status in statuses]

    def open(self, staged_through: int) -> int:
        """Read the marker; on a topic's first use, commit it at ``staged_through``."""
        done = committed_batch(self.settings)
        if done is None:
            mark(self.settings, staged_through)
            log.info("output topic %s starts after micro-batch %d", self.settings.topic, staged_through)
            done = staged_through
        self.sent_through = done
        return done

    def catch_up(self, staged: StagedFiles, through: int, tasks: Tasks) -> dict[str, int | None]:
        """Send the recorded micro-batches up to ``through`` the topic lacks, in one task; its
        ``SENT`` row (empty when nothing was sent)."""
        if self.sent_through is None:
            raise RuntimeError("TopicOutput.open first")
        if through <= self.sent_through:
            return {}
        batches = [(b, tuple(files)) for b, files in staged(self.sent_through, self.tables) if b <= through]
        batches = [(b, files) for b, files in batches if files]
        row: dict[str, int | None] = {}
        if batches:
            task = Send(self.settings, tuple(batches), self.storage)
            row = tasks(send, [task], SENT, SENT_DDL).to_pylist()[0]
        self.sent_through = through
        return row
