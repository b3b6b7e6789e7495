"""What a streaming checkpoint says without Spark: its last committed micro-batch and watermark.

Spark writes ``offsets/<batch>`` when a micro-batch starts (the watermark and settings in its
JSON) and ``commits/<batch>`` when it has finished; only a committed batch's state can be
trusted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from ..checkpoint_paths import Checkpoint
from ..storage import Storage, listing, read_bytes


class InspectError(ValueError):
    """A checkpoint or table cannot be inspected: no such path, not a purgatory checkpoint,
    a state version this release cannot read.  The message is one line that names the path
    and the problem; the command line prints it as it is."""


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint's logs, read at one moment (a running query may have moved on since).

    Attributes:
        path: the checkpoint, as given.
        last_batch: the last committed micro-batch (None: none committed yet).
        watermark_ms: the event-time watermark that batch ran with (``batchWatermarkMs``).
        batch_timestamp_ms: that batch's processing time (``batchTimestampMs``).
        next_watermark_ms: the watermark the next batch will run with (from the commit).
        running_batch: a batch started but not committed (running, or to be replayed).
        app_id: the Delta app id of the query's commits (``start``'s ``purgatory-id``).
        conf: the session settings Spark keeps with the query (shuffle partitions ...).
    """

    path: str
    last_batch: int | None
    watermark_ms: int | None
    batch_timestamp_ms: int | None
    next_watermark_ms: int | None
    running_batch: int | None
    app_id: str | None
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def groups(self) -> int | None:
        """State partitions (``PurgatoryConfig.groups`` for a query ``start`` began)."""
        value = self.conf.get("spark.sql.shuffle.partitions")
        return int(value) if value else None


def read_checkpoint(checkpoint: str, *, storage: Storage | None = None) -> CheckpointInfo:
    """Read ``checkpoint``'s offsets and commits logs (no Spark needed).

    Raises:
        InspectError: no such checkpoint, no streaming query ever ran on it, or it has no
            operator state (not a purgatory checkpoint).
    """
    fs, files = Checkpoint(checkpoint).opened(storage)
    info = fs.get_file_info(files.path)
    if info.type == pafs.FileType.NotFound:
        raise InspectError(f"no such checkpoint: {checkpoint}")
    if info.type != pafs.FileType.Directory and not _exists(fs, files.offsets):
        raise InspectError(f"not a checkpoint (a file, not a directory): {checkpoint}")
    offsets = _batches(fs, files.offsets)
    if not offsets and not _exists(fs, files.spark_metadata):
        raise InspectError(f"not a streaming checkpoint (no offsets log): {checkpoint}")
    if offsets and not _exists(fs, files.spark_state):
        raise InspectError(f"not a purgatory checkpoint (no operator state under it): {checkpoint}")
    commits = _batches(fs, files.commits)
    last = max(commits) if commits else None
    started = max(offsets) if offsets else None
    meta = _log_entry(fs, f"{files.offsets}/{last}") if last is not None else {}
    commit = _log_entry(fs, f"{files.commits}/{last}") if last is not None else {}
    return CheckpointInfo(
        path=checkpoint,
        last_batch=last,
        watermark_ms=_int(meta.get("batchWatermarkMs")),
        batch_timestamp_ms=_int(meta.get("batchTimestampMs")),
        next_watermark_ms=_int(commit.get("nextBatchWatermarkMs")),
        running_batch=started if started is not None and (last is None or started > last) else None,
        app_id=_read_text(fs, files.app_id),
        conf={k: str(v) for k, v in (meta.get("conf") or {}).items()},
    )


def batch_watermark_ms(checkpoint: str, batch: int, *, storage: Storage | None = None) -> int | None:
    """The watermark micro-batch ``batch`` ran with (its offsets entry), None if absent."""
    fs, files = Checkpoint(checkpoint).opened(storage)
    try:
        return _int(_log_entry(fs, f"{files.offsets}/{batch}").get("batchWatermarkMs"))
    except (FileNotFoundError, OSError):
        return None


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def _batches(fs: pafs.FileSystem, directory: str) -> list[int]:
    """Batch ids of a log directory (its entries are named by the batch id; ``.crc`` and
    temporary files are not entries)."""
    return [int(i.base_name) for i in listing(fs, directory) if i.base_name.isdigit()]


#: the head of a log entry read for its metadata line: the version and metadata lines come
#: first, the sources' offsets (as long as a topic has partitions) after them
_LOG_HEAD_BYTES = 64 * 1024
#: the most of the app id file read (a short id)
_ID_BYTES = 4096


def _log_entry(fs: pafs.FileSystem, path: str) -> dict:
    """The JSON metadata line of an offsets or commits entry (after the ``v1`` line)."""
    lines = read_bytes(fs, path, _LOG_HEAD_BYTES).decode("utf-8", errors="replace").splitlines()
    try:
        return json.loads(lines[1]) if len(lines) > 1 else {}
    except json.JSONDecodeError:
        return {}


def _read_text(fs: pafs.FileSystem, path: str) -> str | None:
    try:
        return read_bytes(fs, path, _ID_BYTES).decode("utf-8").strip() or None
    except (FileNotFoundError, OSError, UnicodeDecodeError):
        return None


def _int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[arg-type]
