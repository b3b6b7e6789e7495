"""A checkpoint's layout: its shard count, the rescale journal, and the lease of a running query.

A checkpoint runs the shard count it was started with until ``spark-purgatory rescale``
changes it.  Three small files under the checkpoint: ``purgatory-layout`` (the shard count
and its history), ``purgatory-rescale`` (the journal of a rescale under way) and
``purgatory-running`` (the lease of the query running on it, ``RunLease``).

Invariant: after ``recover`` the checkpoint is on exactly one layout (the old one, complete,
or the new one, finished), whatever step a crash interrupted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs

from ..checkpoint_paths import Checkpoint, OpenCheckpoint, StatePath, open_checkpoint
from ..config import ConfigError, PurgatoryConfig
from ..runtime.processes import alive
from ..storage import Storage, listing, read_bytes, remove, write_whole
from .increments import directory_of, parsed
from .pending_counts import PendingRecord
from .segments import SegmentStore

log = logging.getLogger(__name__)

#: the session setting Spark keeps in the offsets log: the partitions, ``PurgatoryConfig.groups``
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


#: a lease not renewed for this long is stale; the handle renews it every ``LEASE_RENEW_S``
LEASE_EXPIRY_S = 60
LEASE_RENEW_S = 15


class RescaleError(RuntimeError):
    """``rescale`` refused: one line saying why and what to do."""


class CheckpointBusyError(RuntimeError):
    """``start`` refused: another query runs on the checkpoint (one line, with what to do)."""


# -- the journal: recover and finish --------------------------------------------------------------------


def recover(
    checkpoint: str | OpenCheckpoint, *, storage: Storage | None = None, config: PurgatoryConfig | None = None
) -> str | None:
    """Complete or undo a rescale a crash interrupted: ``"rolled back"``, ``"finished"`` or
    None (none was under way); ``config``: the state path of a checkpoint given by its path."""
    chk = open_checkpoint(checkpoint, storage, config.state_path if config else "")
    fs, files, storage = chk.fs, chk.files, chk.storage
    journal = read_json(fs, files.rescale_journal)
    if journal is None:
        return None
    batch = int(journal["batch"])
    if fs.get_file_info(f"{files.commits}/{batch}").is_file:
        finish(chk, storage, journal, None, config)
        return "finished"
    # the old layout is complete: remove what the new one wrote (named by no committed version)
    remove(fs, [f"{files.offsets}/{batch}", f"{files.offsets}/.{batch}.crc"])
    operator = files.operator_state
    for name in directories(fs, operator):
        if name.isdigit():
            version = batch + 1  # the state version micro-batch ``batch`` leaves
            written = f"{operator}/{name}/{version}.snapshot"
            remove(fs, [written, f"{operator}/{name}/.{version}.snapshot.crc"])
            if int(name) > int(journal["from"]) and not listing(fs, f"{operator}/{name}", recursive=True):
                fs.delete_dir(f"{operator}/{name}")
    store = SegmentStore(files.state_path, storage=storage)
    before = set(journal["segments_before"])
    store.delete([name for name in store.segments() if name not in before])
    if "delta_version" in journal:  # the new shards' delta files (``increments``)
        store.delete([n for n in store.delta_files() if parsed(n).version >= int(journal["delta_version"])])
    remove(fs, [files.rescale_journal])
    return "rolled back"


def finish(
    checkpoint: str | OpenCheckpoint,
    storage: Storage,
    journal: dict,
    pending: dict[int, int] | None,
    config: PurgatoryConfig | None = None,
) -> None:
    """Step 6 (idempotent): the layout record, the pending record, old files, the journal."""
    chk = open_checkpoint(checkpoint, storage, config.state_path if config else "")
    fs, files = chk.fs, chk.files
    layout = layout_of(chk) or {"history": []}
    if not any(h.get("batch") == journal["batch"] for h in layout["history"]):
        layout["history"].append(
            {
                "batch": journal["batch"],
                "from": journal["from"],
                "to": journal["to"],
                "at": journal["started_at"],
            }
        )
    layout["shards"] = journal["to"]
    write_whole(fs, files.layout, lambda out: out.write(json.dumps(layout).encode()))
    if pending is not None:
        PendingRecord.under(chk.path, storage).write(journal["batch"], {s: n for s, n in pending.items()})
    store = SegmentStore(files.state_path, storage=storage)
    store.delete(journal["old_segments"])
    # the delta files of shard numbers the new layout has not (the others' are swept by it)
    gone = {directory_of(s) for s in range(int(journal["to"]) + 1, int(journal["from"]) + 1)}
    store.delete([name for name in store.delta_files() if name.rsplit("/", 1)[0] in gone])
    # relays all received (refused otherwise), nothing parked: these name the old shards
    sfs, sroot = storage.filesystem(files.state_path)
    state = StatePath(sroot)
    remove(sfs, [i.path for i in listing(sfs, state.mailbox)])
    remove(sfs, [i.path for i in listing(sfs, state.verdicts, recursive=True) if i.is_file])
    remove(fs, [files.rescale_journal])


def check_layout(checkpoint: OpenCheckpoint, shards: int) -> None:
    """Before a query starts: ``recover``, then refuse ``shards`` other than the checkpoint's
    (``ConfigError``): Spark would keep the checkpoint's partitions."""
    recover(checkpoint)
    recorded = recorded_shards(checkpoint)
    if recorded is not None and recorded != shards:
        layout = layout_of(checkpoint)
        named = checkpoint.path  # as the user named it
        since = f" since its rescale at micro-batch {layout['history'][-1]['batch']}" if layout else ""
        raise ConfigError(
            f"checkpoint {named} runs {recorded} shards{since}, not purgatory.shards={shards}: "
            f"set purgatory.shards={recorded}, or stop and run "
            f"`spark-purgatory rescale --checkpoint {named} --shards {shards}`"
        )


def recorded_shards(checkpoint: str | OpenCheckpoint, *, storage: Storage | None = None) -> int | None:
    """The shards Spark's last offsets entry records, None for a new checkpoint."""
    chk = open_checkpoint(checkpoint, storage)
    fs, files = chk.fs, chk.files
    offsets = [int(i.base_name) for i in listing(fs, files.offsets) if i.base_name.isdigit()]
    if not offsets:
        return None
    lines = read_bytes(fs, f"{files.offsets}/{max(offsets)}").decode("utf-8").split("\n")
    recorded = (json.loads(lines[1]).get("conf") or {}).get(SHUFFLE_PARTITIONS) if len(lines) > 1 else None
    return None if recorded is None else PurgatoryConfig.shards_in(int(recorded))


def default_shards(spark: Any, checkpoint: str | OpenCheckpoint, *, storage: Storage | None = None) -> int:
    """The shard count when none is configured: the checkpoint's, or for a new checkpoint the
    session's parallelism (about one shard per core), said in one log line."""
    recorded = recorded_shards(checkpoint, storage=storage)
    if recorded is not None:
        return recorded
    try:
        parallelism = int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect and shared clusters have no sparkContext
        parallelism = int(spark.conf.get("spark.default.parallelism", None) or 2)
    shards = max(1, parallelism)
    log.warning(
        "purgatory.shards is not configured: %d shards for the new checkpoint %s (the session's "
        "parallelism, about one per executor core); set purgatory.shards to choose, "
        "`spark-purgatory rescale` to change it later",
        shards,
        checkpoint.path if isinstance(checkpoint, OpenCheckpoint) else checkpoint,
    )
    return shards


def with_default_shards(
    config: PurgatoryConfig, spark: Any, checkpoint: str | OpenCheckpoint
) -> PurgatoryConfig:
    """``config`` with ``default_shards``' count (``purgatory.shards`` left out)."""
    shards = default_shards(spark, checkpoint, storage=Storage.of(config))
    return dataclasses.replace(config, shards=shards)


def layout_of(checkpoint: str | OpenCheckpoint, *, storage: Storage | None = None) -> dict | None:
    """The layout record: ``{"shards": N, "history": [{"batch", "from", "to", "at"}, ...]}``,
    None for a checkpoint never rescaled."""
    chk = open_checkpoint(checkpoint, storage)
    return read_json(chk.fs, chk.files.layout)


def directories(fs: pafs.FileSystem, directory: str) -> list[str]:
    """The names of the directories in ``directory`` (none if it does not exist)."""
    selector = pafs.FileSelector(directory, allow_not_found=True)
    return sorted(i.base_name for i in fs.get_file_info(selector) if i.type == pafs.FileType.Directory)


def read_json(fs: pafs.FileSystem, path: str) -> dict | None:
    try:
        return json.loads(read_bytes(fs, path))
    except (FileNotFoundError, OSError, ValueError):
        return None


def now_text() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# -- a running query ---------------------------------------------------------------------------------


class RunLease:
    """``<checkpoint>/purgatory-running`` while a query runs on the checkpoint: its driver's host
    and process, a token, and when it was last renewed (every ``LEASE_RENEW_S``).

    A lease is live while it is renewed within ``LEASE_EXPIRY_S`` and, on this host, its
    process is alive.  Two starts racing for a free lease are told apart by reading it back.
    """

    def __init__(self, checkpoint: str | OpenCheckpoint, storage: Storage | None = None) -> None:
        chk = open_checkpoint(checkpoint, storage)
        self.storage, self.fs, self.path, self.checkpoint = chk.storage, chk.fs, chk.files.lease, chk.path
        self.token: str | None = None
        self.since: str | None = None

    def check_unheld(self) -> None:
        """Raise ``CheckpointBusyError`` (one line, naming the query) while a query holds it."""
        holder = self.holder()
        if holder is not None:
            raise CheckpointBusyError(self._busy(holder, "a second query on it is refused"))

    def take(self) -> None:
        """Hold the lease, or raise ``CheckpointBusyError`` naming the query that holds it."""
        self.check_unheld()
        self.token, self.since = os.urandom(8).hex(), now_text()
        self._write()
        read = read_json(self.fs, self.path)
        if read is None or read.get("token") != self.token:  # another start took it meanwhile
            holder, self.token = read or {}, None
            raise CheckpointBusyError(self._busy(holder, "a second query on it is refused"))

    def renew(self) -> bool:
        """Note that the query still runs; False if another query took it after it went stale."""
        if self.token is None:
            return False
        read = read_json(self.fs, self.path)
        if read is not None and read.get("token") != self.token:
            return False
        self._write()
        return True

    @contextlib.contextmanager
    def given_back_on_error(self) -> Iterator[None]:
        """Release the lease if the block raises (a start that failed runs nothing)."""
        try:
            yield
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Give the lease back (never another query's)."""
        read = read_json(self.fs, self.path)
        if self.token is not None and read is not None and read.get("token") == self.token:
            remove(self.fs, [self.path])
        self.token = None

    def _write(self) -> None:
        lease = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": self.since or now_text(),
            "renewed": now_text(),
            "token": self.token,
        }
        body = json.dumps(lease).encode()
        write_whole(self.fs, self.path, lambda out: out.write(body))

    def holder(self) -> dict | None:
        """The live lease (see the class docstring), None when free or stale."""
        lease = read_json(self.fs, self.path)
        if lease is None:
            return None
        if lease.get("host") == socket.gethostname() and not alive(int(lease.get("pid", -1))):
            return None
        renewed = lease.get("renewed") or lease.get("since")
        try:
            age = (dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(renewed)).total_seconds()
        except (TypeError, ValueError):
            return lease
        return None if age > LEASE_EXPIRY_S else lease

    def check_free(self) -> None:
        lease = self.holder()
        if lease is not None:
            raise RescaleError(self._busy(lease, "stop it first"))

    def _busy(self, lease: dict, then: str) -> str:
        if lease.get("host") == socket.gethostname() and lease.get("pid") == os.getpid():
            return f"a query runs on {self.checkpoint}, started in this process: stop it first (its stop())"
        return (
            f"a query runs on {self.checkpoint} (driver {lease.get('host')} pid {lease.get('pid')} "
            f"since {lease.get('since')}): {then} (if that driver is gone, wait {LEASE_EXPIRY_S} s "
            f"or delete {Checkpoint(self.checkpoint).lease})"
        )
