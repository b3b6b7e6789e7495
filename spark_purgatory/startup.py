"""What ``start`` settles before it builds the query: the trigger, the session, the app id.

The app id, under which output commits are idempotent, belongs to the checkpoint: written
once when it is new, so a restarted driver commits a replayed micro-batch under the same id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import uuid
from dataclasses import dataclass
from typing import Any

from .checkpoint_paths import Checkpoint, OpenCheckpoint, open_checkpoint
from .config import ConfigError, PurgatoryConfig, parse_interval_ms
from .storage import Storage, write_once

#: the trigger values ``start`` (and the job's ``--trigger``) accept
TRIGGERS = "available-now | processing-time=<interval> (e.g. processing-time=10s)"
_NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"


def app_id_of(checkpoint: str | OpenCheckpoint, *, storage: Storage | None = None) -> str:
    """The Delta app id of the query on ``checkpoint``: held by the checkpoint, never by the host."""
    chk = open_checkpoint(checkpoint, storage)
    fs, files = chk.fs, chk.files
    try:  # a checkpoint Spark already ran on, from before the id file: keep its id (its path's)
        started = fs.get_file_info(files.spark_metadata).is_file
    except OSError:
        started = False
    if started:
        new = "spark-purgatory-" + hashlib.sha1(os.path.abspath(chk.path).encode()).hexdigest()[:12]
    else:
        new = f"spark-purgatory-{uuid.uuid4().hex[:16]}"
    return write_once(fs, files.app_id, new.encode()).decode().strip()


@dataclass(frozen=True)
class Trigger:
    """A trigger as ``start`` takes it (``TRIGGERS``), read once and handed down: ``interval``
    is Spark's processing-time interval, ``interval_ms`` the same in ms (what the sink's
    linger and the reaper go by); both None for ``available-now``.

    >>> Trigger.parse("processing-time=10s"), Trigger.parse("processing-time=2 minutes").interval_ms
    (Trigger(interval='10 seconds', interval_ms=10000), 120000)
    >>> Trigger.parse("available-now").available_now
    True
    """

    interval: str | None
    interval_ms: int | None

    @property
    def available_now(self) -> bool:
        return self.interval is None

    @classmethod
    def parse(cls, trigger: str, *, option: str = "trigger") -> Trigger:
        """``trigger`` read; ``ConfigError`` (naming ``option``) unless it is one of ``TRIGGERS``
        with an interval that parses.  ``processing-time=10s`` is Spark's ``10 seconds``;
        other Spark interval strings pass through."""
        if trigger == "available-now":
            return cls(None, None)
        if not trigger.startswith("processing-time="):
            raise ConfigError(f"{option} must be {TRIGGERS}, got {trigger!r}")
        value = trigger.split("=", 1)[1].strip()
        interval = f"{value[:-1]} seconds" if value.endswith("s") and value[:-1].isdigit() else value
        return cls(interval, parse_interval_ms(interval))


def check_trigger(trigger: str, *, option: str = "trigger") -> None:
    """Raise ``ConfigError`` (naming ``option``) unless ``trigger`` is one of ``TRIGGERS``."""
    Trigger.parse(trigger, option=option)


def with_checkpoint_defaults(config: PurgatoryConfig, checkpoint: str) -> PurgatoryConfig:
    """Big shard state in segment files, and staged rows, next to the checkpoint unless set
    (what ``start`` runs with, and what the inspection reads)."""
    files = Checkpoint(checkpoint, config.state_path)
    return dataclasses.replace(
        config,
        state_path=files.state_path,
        accumulator_staging_path=config.accumulator_staging_path or files.accumulator,
    )


def _session_of(operations: Any, events: Any) -> Any:
    for source in (operations, events):
        if not isinstance(source, str):
            return source.sparkSession
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise ValueError("both inputs are paths and no session is active: pass spark=...")
    return spark


def _check_session(spark: Any) -> None:
    """Refuse settings that would break the query, saying what to set: without no-data
    micro-batches, expiries would wait for new input."""
    if str(spark.conf.get(_NO_DATA_BATCHES, "true")).lower() == "false":
        raise ConfigError(
            f"{_NO_DATA_BATCHES} is false: expiries would wait for new input; "
            f'set spark.conf.set("{_NO_DATA_BATCHES}", "true")'
        )
