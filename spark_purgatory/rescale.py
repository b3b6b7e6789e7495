"""Rescale a stopped checkpoint: its shards, ``S`` -> ``N``, with every pending operation kept.

Spark fixes a query's shuffle partitions in its checkpoint, so ``rescale`` rewrites the
state store and the segment files as a new micro-batch of the checkpoint, with no JVM:

1. **Refuse** what it cannot do safely, each with one line (``RescaleError``).
2. **Read** every shard group's value as the last committed micro-batch K left it (state
   version K + 1) and load the shards.
3. **Reshard** them, keys sent where the routing will send them.
4. **Write the new layout beside the old**: a journal, the new shards' segment files, each
   new partition's state at version K + 2, then the offsets entry K + 1.
5. **Switch**, atomically: the commit entry K + 1.  The next run starts on the new layout,
   the same input offsets, the same watermark.
6. **Finish**: the layout and pending records, the old shards' files, the journal.

**A crash anywhere** leaves the journal.  ``recover`` (``start`` and ``rescale`` call it
first) deletes what step 4 wrote when the commit entry K + 1 is missing, else finishes
step 6.  Either way the checkpoint runs on exactly one layout.

Invariant: the run after ``rescale`` gives the outcomes, unmatched events and rejects the run
without it would have given.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from .checkpoint_paths import Checkpoint
from .config import PurgatoryConfig
from .engine.purgatory import Purgatory
from .handoff.end_of_input import EndOfInput
from .handoff.mailbox import Mailbox
from .handoff.shard_handoff import ShardHandOff
from .inspect.checkpoint import InspectError, read_checkpoint
from .runtime.processes import kill_at
from .shard.labels import shard_labels, spark_hash_int
from .shard.step import decide
from .spark import state_files
from .spark.group_state import encoding_of, shard_bytes, to_group_state
from .spark.key_hash import shards_of
from .state import SegmentStore, load_state, save_state
from .state.layout import (
    SHUFFLE_PARTITIONS,
    RescaleError,
    RunLease,
    directories,
    finish,
    now_text,
    recover,
)
from .state.reshard import ReshardError, reshard
from .state.shard_state import Lineage
from .state.versions import IncompatibleCheckpointError, check_formats
from .storage import Storage, read_bytes, write_whole

log = logging.getLogger(__name__)

#: PURGATORY_RESCALE_FAULT=<step>: the process kills itself (SIGKILL) as it reaches that step
FAULT = "PURGATORY_RESCALE_FAULT"


@dataclass(frozen=True)
class RescaleResult:
    """What ``rescale`` did: ``from_shards`` -> ``to_shards`` as micro-batch ``batch``
    (the last committed one was ``batch - 1``), moving ``pending`` operations, in ``seconds``."""

    checkpoint: str
    from_shards: int
    to_shards: int
    batch: int
    pending: int
    seconds: float
    by_shard: dict[int, int] = field(default_factory=dict)


def rescale(
    checkpoint: str,
    shards: int,
    *,
    config: PurgatoryConfig | None = None,
    storage: Storage | None = None,
) -> RescaleResult:
    """Rescale the stopped query on ``checkpoint`` to ``shards`` primary shards.

    Args:
        checkpoint: the query's checkpoint (a path or URI).
        shards: the new ``purgatory.shards``; the next ``start`` must use it.
        config: the query's configuration (state path, ``storage.*``, retention, shard key
            delimiter); its ``shards`` is ignored.
        storage: the ``storage.*`` settings (``config``'s when None).

    Raises:
        RescaleError: what it refuses, in one line.

    Example::

        from spark_purgatory.rescale import rescale
        done = rescale("/chk/orders", 8)       # the query is stopped
        start(..., checkpoint="/chk/orders", config=PurgatoryConfig(shards=8))
    """
    import time

    began = time.perf_counter()
    config = config or PurgatoryConfig()
    storage = storage or Storage.of(config)
    if shards < 1:
        raise RescaleError(f"--shards must be at least 1, got {shards}")
    recover(checkpoint, storage=storage, config=config)
    info = _checked(checkpoint, storage)
    old = PurgatoryConfig.shards_in(int(info.conf[SHUFFLE_PARTITIONS]))
    if old == shards:
        raise RescaleError(f"checkpoint {checkpoint} already runs {shards} shards: nothing to do")
    batch = int(info.last_batch)  # type: ignore[arg-type]
    fs, files = Checkpoint(checkpoint, config.state_path).opened(storage)
    cfg = PurgatoryConfig(**{**config.__dict__, "shards": old, "state_path": files.state_path})
    store = SegmentStore(
        files.state_path,
        segment_rows=cfg.state_segment_rows,
        retain_versions=cfg.state_retain_versions,
        storage=storage,
    )
    kill_at(FAULT, "read")
    try:
        values = state_files.read_groups(fs, files.operator_state, cfg.groups, batch + 1)
    except state_files.StateFormatError as e:
        raise RescaleError(str(e)) from None
    olds = _load(values, cfg, store)
    _in_flight(olds[old], cfg, storage)
    new_cfg = PurgatoryConfig(**{**cfg.__dict__, "shards": shards})
    try:
        news = reshard(olds, shards, lambda keys: shards_of(keys, shards, cfg.shard_key_delimiter), new_cfg)
    except ReshardError as e:
        raise RescaleError(str(e)) from None
    encoding = encoding_of(checkpoint, storage=storage)
    version = 1 + max((p.lineage.version for p in olds.values() if isinstance(p.lineage, Lineage)), default=0)
    journal = {
        "from": old,
        "to": shards,
        "batch": batch + 1,
        "segments_before": store.segments(),
        # the new shards' delta files are of this version and later (``state.increments``)
        "delta_version": version,
        "old_segments": sorted(
            {name for p in olds.values() for name, *_ in (p.lineage.segments if p.lineage else [])}
        ),
        "started_at": now_text(),
    }
    write_whole(fs, files.rescale_journal, lambda out: out.write(json.dumps(journal).encode()))
    kill_at(FAULT, "segments")
    groups = _new_groups(news, new_cfg, store, encoding, info.next_watermark_ms or 0, version)
    kill_at(FAULT, "snapshots")
    for partition, entries in groups.items():
        state_files.write_version(fs, files.operator_state, partition, batch + 2, entries)
    kill_at(FAULT, "offsets")
    _copy_log(fs, files.offsets, batch, new_cfg.groups)
    kill_at(FAULT, "commit")
    _copy_log(fs, files.commits, batch, None)  # the switch
    kill_at(FAULT, "finish")
    finish(checkpoint, storage, journal, {s: p.pending for s, p in news.items()}, cfg)
    return RescaleResult(
        checkpoint,
        old,
        shards,
        batch + 1,
        sum(p.pending for p in news.values()),
        round(time.perf_counter() - began, 3),
        {s: p.pending for s, p in news.items()},
    )


# -- refusals ---------------------------------------------------------------------------------------


def _checked(checkpoint: str, storage: Storage) -> Any:
    """The checkpoint's logs, once every refusal has been checked."""
    try:
        info = read_checkpoint(checkpoint, storage=storage)
    except InspectError as e:
        raise RescaleError(str(e)) from None
    RunLease(checkpoint, storage).check_free()
    try:  # a newer version's checkpoint, or one that needs `spark-purgatory upgrade` first
        check_formats(checkpoint, storage)
    except IncompatibleCheckpointError as refused:
        raise RescaleError(str(refused)) from None
    if info.running_batch is not None:
        raise RescaleError(
            f"micro-batch {info.running_batch} of {checkpoint} started and did not commit: start the query "
            "once (trigger available-now) so that it completes, stop it, then rescale"
        )
    if info.last_batch is None:
        raise RescaleError(
            f"{checkpoint} has no committed micro-batch: start it with the shards you want instead"
        )
    end = EndOfInput(checkpoint, storage)
    if end.recorded() is not None or end.declared():
        raise RescaleError(f"the input of {checkpoint} has ended: there is nothing left to rescale for")
    conf = info.conf
    if SHUFFLE_PARTITIONS not in conf:
        raise RescaleError(
            f"{checkpoint}'s offsets log records no shuffle partitions: not a state format rescale knows"
        )
    unknown = state_files.unknown_format(conf)
    if unknown:
        raise RescaleError(
            f"{checkpoint} keeps its state in a format rescale does not know ({', '.join(unknown)}): "
            "it reads Spark's HDFS-backed state store with the lz4 codec only"
        )
    fs, files = Checkpoint(checkpoint).opened(storage)
    operators = [name for name in directories(fs, files.spark_state) if name.isdigit()]
    if operators != ["0"]:
        raise RescaleError(f"{checkpoint} has stateful operators {operators}: not a purgatory checkpoint")
    return info


def _in_flight(cross: Purgatory, config: PurgatoryConfig, storage: Storage) -> None:
    """Refuse relays the cross-shard group has not received (they name old shards)."""
    box = Mailbox.beside(config.state_path, storage)
    unreceived = sorted({b for b, _ in box.batches() if b > cross.relays_through})
    if unreceived:
        raise RescaleError(
            f"{len(unreceived)} micro-batch(es) of relays to the cross-shard group are not received yet: "
            "start the query once (trigger available-now), which receives them, then rescale"
        )


# -- reading and writing the groups ---------------------------------------------------------------------


def _load(values: dict[int, state_files.GroupValue], config: PurgatoryConfig, store: SegmentStore) -> dict:
    """The old shards' engines (a group without a value: an empty one)."""
    shards: dict[int, Purgatory] = {}
    for s in range(config.groups):
        g = values.get(s)
        if g is None or g.state is None:
            p = Purgatory(config)
        else:
            try:
                p = load_state(shard_bytes(g.state), config, store)
            except ValueError as e:
                raise RescaleError(str(e).splitlines()[0]) from None
        p.shard = s
        shards[s] = p
    return shards


def _new_groups(
    news: dict[int, Purgatory],
    config: PurgatoryConfig,
    store: SegmentStore,
    encoding: Any,
    watermark: int,
    version: int,
) -> dict[int, list[state_files.GroupValue]]:
    """Each new partition's entries: the new shards the shard step keeps at ``watermark``, the
    one the next micro-batch runs at, saved, under their groups' labels, with the timeouts the
    step sets."""
    handoff = ShardHandOff.of(config)
    labels = shard_labels(config.groups)
    groups: dict[int, list[state_files.GroupValue]] = {p: [] for p in range(config.groups)}
    for s, p in news.items():
        keep, _, timeout = decide(p, s, watermark, watermark, handoff)
        if not keep:
            continue
        value = to_group_state(save_state(p, store, version=version), encoding)
        timeout = state_files.NO_TIMEOUT if timeout is None else timeout
        groups[spark_hash_int(labels[s]) % config.groups].append(
            state_files.GroupValue(labels[s], value, timeout)
        )
    return groups


def _copy_log(fs: pafs.FileSystem, directory: str, batch: int, partitions: int | None) -> None:
    """Write entry ``batch + 1`` of an offsets or commits log as a copy of entry ``batch``
    (with ``partitions`` shuffle partitions in an offsets entry's session settings)."""
    lines = read_bytes(fs, f"{directory}/{batch}").decode("utf-8").split("\n")
    if partitions is not None:
        meta = json.loads(lines[1])
        meta["conf"][SHUFFLE_PARTITIONS] = str(partitions)
        lines[1] = json.dumps(meta, separators=(",", ":"))
    body = "\n".join(lines).encode("utf-8")
    write_whole(fs, f"{directory}/{batch + 1}", lambda out: out.write(body))
