"""Synthetic Kafka-flavoured workloads for the demo, the benchmarks and the tests.

Four kinds of delayed operation, as in a broker: ``produce`` waits for ``target`` distinct
replicas (``count`` with sources), ``fetch`` for ``min.bytes`` (``sum``), ``join`` for every
member (``all``), ``offset`` for a partition's high watermark (``offset``; its progress
events are untargeted, and may precede the wait).  A fraction ``complete_ratio`` of
operations receive enough events before their deadline; the rest expire.  Times are epoch ms.

>>> w = generate(n_ops=1000, seed=3)
>>> sorted(w.operations["condition"].unique())
['all', 'count', 'offset', 'sum']
>>> bool(w.events["ts"].is_monotonic_increasing)
True
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .contract import EVENT_COLUMNS
from .engine.conditions import ALL, CONDITION_NAMES, COUNT, OFFSET, SUM

__all__ = [
    "HOUSES",
    "PAYMENT_TIMEOUT_MS",
    "START_MS",
    "Workload",
    "generate",
    "generate_confirmations",
    "payments",
    "write_json_lines",
    "write_parquet_files",
    "write_payments",
]

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass
class Workload:
    """Operations and completion events (canonical columns, ``ts`` in epoch ms)."""

    operations: pd.DataFrame
    events: pd.DataFrame
    expected_completed: int


def generate(
    n_ops: int = 10_000,
    *,
    complete_ratio: float = 0.7,
    timeout_ms: int = 30_000,
    ops_per_second: float = 2_000.0,
    mix: tuple[float, float, float, float] = (0.4, 0.25, 0.15, 0.2),
    partitions: int = 64,
    seed: int = 0,
    start_ms: int = START_MS,
    multi_key: float = 0.0,
    warned: float = 0.0,
    withdrawn: float = 0.0,
) -> Workload:
    """Generate ``n_ops`` operations and the events that complete ~``complete_ratio`` of them.

    ``mix``: the share of each kind; ``multi_key``: the share of produce, fetch and join
    operations that also watch the next partition's key, often in another shard; ``warned``:
    the share given a ``warn_ms`` (1 ms to the timeout); ``withdrawn``: the share a cancel
    event reaches at a random time of its window, half by op_id, half by key.  Both are drawn
    apart: the rest is as without them.
    """
    rng = np.random.default_rng(seed)
    ts = start_ms + np.sort(rng.uniform(0, n_ops / ops_per_second * 1000, n_ops)).astype(np.int64)
    kind = rng.choice(4, size=n_ops, p=np.asarray(mix) / np.sum(mix))
    completes = rng.random(n_ops) < complete_ratio
    partition = rng.integers(0, partitions, n_ops)
    topic_key = np.char.add("orders-", partition.astype(str)).astype(object)
    group_key = np.char.add("group-", (partition % 16).astype(str)).astype(object)
    # one purgatory per kind in a broker: each watches its own key space
    prefix = np.array(["produce:", "fetch:", "", "hw:"], dtype=object)[kind]
    d = _Draft(
        rng=rng,
        ts=ts,
        keys=prefix + np.where(kind == 2, group_key, topic_key),
        op_id=np.char.add("op-", np.arange(n_ops).astype(str)).astype(object),
        completes=completes,
        timeout_ms=timeout_ms,
        target=np.full(n_ops, np.nan),
        members=np.full(n_ops, None, dtype=object),
    )
    for code, add in enumerate((_produce, _fetch, _join)):
        add(d, np.flatnonzero(kind == code))
    _offset(d, np.flatnonzero(kind == 3), start_ms)

    keys = [[k] for k in d.keys]
    events = pd.concat(d.events, ignore_index=True)
    if multi_key > 0:
        keys, events = _second_keys(d, kind, partition, multi_key, events)
    operations = pd.DataFrame(
        {
            "op_id": d.op_id,
            "keys": keys,
            "ts": ts,
            "timeout_ms": np.int64(timeout_ms),
            "condition": _KIND_CONDITIONS[kind],
            "target": d.target,
            "members": d.members,
            "payload": np.where(kind == 0, "acks=all", None),
        }
    )
    if warned or withdrawn:
        operations, events = _warned_and_withdrawn(operations, events, warned, withdrawn, seed)
    events = events.sort_values("ts", kind="stable", ignore_index=True)
    return Workload(operations, events[[c for c in EVENT_COLUMNS if c in events]], int(completes.sum()))


def _warned_and_withdrawn(
    operations: pd.DataFrame, events: pd.DataFrame, warned: float, withdrawn: float, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``generate``'s warnings asked and cancels sent, from a generator of their own."""
    rng = np.random.default_rng([seed, 79])
    n, timeout = len(operations), operations["timeout_ms"].to_numpy()
    lead = rng.integers(1, timeout + 1)  # 1 ms to the timeout
    asked = rng.random(n) < warned
    operations = operations.assign(warn_ms=np.where(asked, lead, None))
    gone = np.flatnonzero(rng.random(n) < withdrawn)
    by_id = rng.random(gone.size) < 0.5
    cancels = pd.DataFrame(
        {
            "key": [keys[0] for keys in operations["keys"].to_numpy()[gone]],
            "ts": operations["ts"].to_numpy()[gone] + rng.integers(0, timeout[gone] + 1),
            "op_id": np.where(by_id, operations["op_id"].to_numpy()[gone], None),
            "cancel": True,
        }
    )
    return operations, pd.concat([events.assign(cancel=None), cancels], ignore_index=True)


def _second_keys(
    d: _Draft, kind: np.ndarray, partition: np.ndarray, share: float, events: pd.DataFrame
) -> tuple[list[list[str]], pd.DataFrame]:
    """A second key for ``share`` of the produce/fetch/join operations, and about half of
    their events moved onto it (events name their operation, so nothing else matches them)."""
    multi = (d.rng.random(kind.size) < share) & (kind < 3)
    second = d.keys.copy()
    second[multi] = np.array([k.rsplit("-", 1)[0] for k in d.keys[multi]], dtype=object) + np.char.add(
        "-x", (partition[multi] + 1).astype(str)
    ).astype(object)
    keys = [[k, k2] if m else [k] for k, k2, m in zip(d.keys, second, multi, strict=True)]
    owner = pd.Series(np.arange(kind.size), index=d.op_id)
    row = owner.reindex(events["op_id"].to_numpy(dtype=object)).to_numpy()
    has = ~np.isnan(row)
    at = row[has].astype(np.int64)
    move = multi[at] & (d.rng.random(at.size) < 0.5)
    key = events["key"].to_numpy(dtype=object).copy()
    idx = np.flatnonzero(has)[move]
    key[idx] = second[at[move]]
    return keys, events.assign(key=key)


#: the condition of each kind of broker operation: produce, fetch, join, offset
_KIND_CONDITIONS = CONDITION_NAMES[[COUNT, SUM, ALL, OFFSET]]


@dataclass
class _Draft:
    """The operations being generated (one array entry per operation) and their events."""

    rng: np.random.Generator
    ts: np.ndarray
    keys: np.ndarray
    op_id: np.ndarray
    completes: np.ndarray
    timeout_ms: int
    target: np.ndarray
    members: np.ndarray
    events: list[pd.DataFrame] = field(default_factory=list)

    def add_events(self, rows: np.ndarray, per_op: np.ndarray, **cols: Any) -> None:
        """Events for ``rows``: ``per_op[i]`` each, spread before 90% of the timeout."""
        if rows.size == 0:
            return
        owner = np.repeat(rows, per_op)
        delay = self.rng.uniform(0, 0.9 * self.timeout_ms, owner.size).astype(np.int64)
        frame = pd.DataFrame(
            {"key": self.keys[owner], "ts": self.ts[owner] + delay, "op_id": self.op_id[owner]}
        )
        for name, value in cols.items():
            frame[name] = value(owner, per_op) if callable(value) else value
        self.events.append(frame)


def _produce(d: _Draft, produce: np.ndarray) -> None:
    """acks=all from 2-3 replicas; short ones get one ack too few."""
    replicas = d.rng.integers(2, 4, produce.size)
    d.target[produce] = replicas
    acks = np.where(d.completes[produce], replicas, replicas - 1)
    d.add_events(produce, acks, source=_numbered("broker-"), value=np.nan)


def _fetch(d: _Draft, fetch: np.ndarray) -> None:
    """min.bytes, filled by 1-4 chunks; short ones get half."""
    min_bytes = d.rng.choice([1024, 4096, 16384, 65536], fetch.size).astype(float)
    d.target[fetch] = min_bytes
    chunks = d.rng.integers(1, 5, fetch.size)
    share = np.where(d.completes[fetch], 1.0, 0.5)
    filled = 1.0 * d.completes[fetch]
    d.add_events(
        fetch,
        chunks,
        source=None,
        value=lambda owner, n: np.repeat(min_bytes * share / n, n) + np.repeat(filled, n),
    )


def _join(d: _Draft, join: np.ndarray) -> None:
    """All members of the group report; short ones miss one member."""
    size = d.rng.integers(2, 6, join.size)
    d.members[join] = [[f"consumer-{m}" for m in range(s)] for s in size]
    reported = np.where(d.completes[join], size, size - 1)
    d.add_events(join, reported, source=_numbered("consumer-"), value=np.nan)


def _offset(d: _Draft, offset: np.ndarray, start_ms: int) -> None:
    """The partition's high watermark must reach a target offset: it grows ~100 offsets/s and
    a wait asks for a little more.  Short ones see progress one below target (untargeted: keys
    are shared, so the running max may still complete them, as in a real partition)."""
    reach = ((d.ts[offset] - start_ms) / 10.0 + d.rng.integers(50, 1_000, offset.size)).astype(float).round()
    d.target[offset] = reach
    value = np.where(d.completes[offset], reach, reach - 1)
    d.add_events(offset, np.ones(offset.size, dtype=np.int64), op_id=None, source="leader", value=value)


def _numbered(prefix: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Sources ``<prefix>0 .. <prefix>n-1`` for each operation's n events (distinct reporters)."""
    return lambda owner, counts: np.char.add(prefix, _within_group_rank(counts).astype(str)).astype(object)


def _within_group_rank(counts: np.ndarray) -> np.ndarray:
    """0, 1, ..., n-1 for each group of a repeat(counts) layout."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


def _iso(ms: np.ndarray) -> np.ndarray:
    stamps = pd.to_datetime(ms, unit="ms", utc=True)
    return np.asarray(stamps.strftime("%Y-%m-%dT%H:%M:%S.%f").str[:-3] + "Z", dtype=object)


_BAD_OPERATIONS = [
    '{"op_id": "broken-1", "keys": ["orders-1"], "ts": ',
    '{"op_id": "neg", "keys": ["orders-1"], "ts": "2026-01-01T00:00:01Z", "timeout_ms": -5}',
    '{"op_id": "weird", "keys": ["orders-1"], "ts": "2026-01-01T00:00:01Z", "timeout_ms": 5, '
    '"condition": "most"}',
    '{"op_id": 42, "keys": "orders-1", "ts": "yesterday", "timeout_ms": "soon"}',
    "not json at all",
]
_BAD_EVENTS = [
    '{"key": "orders-1", "ts": ',
    '{"key": null, "ts": "2026-01-01T00:00:01Z"}',
    "\x00\x01garbage",
]


def write_json_lines(
    workload: Workload,
    ops_dir: str,
    events_dir: str,
    *,
    files: int = 10,
    malformed: int = 0,
    seed: int = 0,
    progress: Callable[[], None] | None = None,
) -> None:
    """Write the workload as JSON lines, ``files`` files per stream, cut at the same event times
    so file i of each covers the same slice.  ``malformed`` adds broken lines.
    """
    op_ts, ev_ts = workload.operations["ts"].to_numpy(), workload.events["ts"].to_numpy()
    edges = np.linspace(min(op_ts.min(), ev_ts.min()), max(op_ts.max(), ev_ts.max()) + 1, files + 1)
    per_file = {
        ops_dir: _cut(_json_lines(workload.operations), op_ts, edges),
        events_dir: _cut(_json_lines(workload.events), ev_ts, edges),
    }
    rng = np.random.default_rng(seed)
    for i in range(malformed):
        directory, pool = (ops_dir, _BAD_OPERATIONS) if i % 2 == 0 else (events_dir, _BAD_EVENTS)
        chunk = per_file[directory][int(rng.integers(0, files))]
        line = pool[(i // 2) % len(pool)].replace("broken-1", f"broken-{i}")
        chunk.insert(int(rng.integers(0, len(chunk) + 1)), line)
    for directory, chunks in per_file.items():
        _write_files(directory, chunks, progress)


def _json_lines(frame: pd.DataFrame) -> list[str]:
    return [_dumps(r) for r in frame.assign(ts=_iso(frame["ts"].to_numpy())).to_dict("records")]


def _cut(lines: list[str], ts: np.ndarray, edges: np.ndarray) -> list[list[str]]:
    """``lines`` split into one chunk per time slice between ``edges``."""
    slice_of = np.searchsorted(edges, ts, side="right") - 1
    order = np.argsort(slice_of, kind="stable")
    cuts = np.searchsorted(slice_of[order], np.arange(1, edges.size - 1))
    return [np.asarray(lines, dtype=object)[idx].tolist() for idx in np.split(order, cuts)]


def _write_files(directory: str, chunks: list[list[str]], progress: Callable[[], None] | None) -> None:
    """One file per chunk; file sources list files by modification time, so it follows the
    chunk order."""
    os.makedirs(directory, exist_ok=True)
    stamp = time.time() - len(chunks)
    for index, chunk in enumerate(chunks):
        path = os.path.join(directory, f"part-{index:05d}.json")
        with open(path, "w", encoding="utf-8") as out:
            out.write("\n".join(chunk) + ("\n" if chunk else ""))
        try:
            os.utime(path, (stamp + index, stamp + index))
        except OSError:  # object-store mounts (a Unity Catalog volume) may not set times;
            pass  # the files are written in slice order, so their own times follow it
        if progress:
            progress()


def _dumps(record: dict) -> str:
    clean = {k: v for k, v in record.items() if v is not None and not (isinstance(v, float) and np.isnan(v))}
    return json.dumps(clean, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v))


def generate_confirmations(
    n_ops: int = 200_000,
    *,
    complete_ratio: float = 0.7,
    timeout_ms: int = 30_000,
    ops_per_second: float = 2_000.0,
    seed: int = 0,
    start_ms: int = START_MS,
) -> Workload:
    """The simplest purgatory: each operation awaits one confirming event on its own key within
    the timeout, as a stream-stream left-outer join can express, for the benchmarks to compare.
    """
    rng = np.random.default_rng(seed)
    ts = start_ms + np.sort(rng.uniform(0, n_ops / ops_per_second * 1000, n_ops)).astype(np.int64)
    keys = np.char.add("order-", np.arange(n_ops).astype(str)).astype(object)
    operations = pd.DataFrame(
        {
            "op_id": keys,
            "keys": [[k] for k in keys],
            "ts": ts,
            "timeout_ms": np.int64(timeout_ms),
            "condition": "any",
            "target": np.nan,
            "members": None,
            "payload": None,
        }
    )
    done = np.flatnonzero(rng.random(n_ops) < complete_ratio)
    delay = rng.uniform(0, 0.9 * timeout_ms, done.size).astype(np.int64)
    events = pd.DataFrame(
        {"key": keys[done], "ts": ts[done] + delay, "op_id": None, "source": None, "value": np.nan}
    ).sort_values("ts", kind="stable", ignore_index=True)
    return Workload(operations, events, int(done.size))


# -- the payments case -----------------------------------------------------------------------------

#: the payments case's clearing houses and timeout
HOUSES = ("clearing-a", "clearing-b", "clearing-c")
PAYMENT_TIMEOUT_MS = 30_000


def payments(n: int = 360, *, seed: int = 22, start_ms: int = START_MS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The payments case of issue 22, as a new user built it: ``n`` card payments (``count``,
    target 2) awaiting 2 of 3 clearing houses' confirmations within 30 s, and the
    confirmations (about two per payment; ``source`` the house).  ``ts`` in epoch ms.
    """
    rng = np.random.default_rng(seed)
    ts = start_ms + np.arange(n, dtype=np.int64) * 500 + rng.integers(0, 400, n)
    ops = pd.DataFrame(
        {
            "op_id": [f"pay-{i:04d}" for i in range(n)],
            "key": [f"card-{i:04d}" for i in range(n)],
            "ts": ts,
            "timeout_ms": np.full(n, PAYMENT_TIMEOUT_MS, dtype=np.int64),
            "condition": "count",
            "target": 2.0,
            "payload": [f'{{"amount": {a}}}' for a in rng.integers(1, 500, n)],
        }
    )
    rows = []
    for i in range(n):
        houses = rng.permutation(HOUSES)[: rng.choice([1, 2, 3], p=[0.25, 0.45, 0.3])]
        for house in houses:
            rows.append((f"card-{i:04d}", int(ts[i] + rng.integers(0, 40_000)), house))
    events = pd.DataFrame(rows, columns=["key", "ts", "source"]).sort_values("ts", kind="stable")
    return ops, events.reset_index(drop=True)


def write_parquet_files(
    frame: pd.DataFrame, directory: str, *, files: int = 4, cuts: tuple[float, ...], unit: str = "us"
) -> None:
    """``frame`` as ``files`` Parquet files cut at the quantiles ``cuts`` of its event times
    (files in time order, increasing mtimes); ``ts`` a UTC timestamp in ``unit``."""
    os.makedirs(directory, exist_ok=True)
    edges = np.quantile(frame["ts"], cuts)
    part_of = np.searchsorted(edges, frame["ts"], side="right") - 1
    typed = frame.assign(ts=pd.to_datetime(frame["ts"], unit="ms", utc=True))
    stamp = time.time() - 1000
    for i in range(files):
        part = typed[part_of == i]
        table = pa.Table.from_pandas(part, preserve_index=False)
        table = table.set_column(
            table.schema.get_field_index("ts"), "ts", table.column("ts").cast(pa.timestamp(unit, tz="UTC"))
        )
        path = os.path.join(directory, f"part-{i:04d}.parquet")
        pq.write_table(table, path, coerce_timestamps=None if unit == "ns" else unit)
        os.utime(path, (stamp + i, stamp + i))


def write_payments(root: str, *, unit: str = "us") -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    """The payments case under ``root`` as typed Parquet, 4 files per stream cut at different
    event times: (operations, events, their two directories)."""
    ops, events = payments()
    ops_dir, events_dir = os.path.join(root, "payments"), os.path.join(root, "confirmations")
    write_parquet_files(ops, ops_dir, cuts=(0.0, 0.3, 0.55, 0.8), unit=unit)
    write_parquet_files(events, events_dir, cuts=(0.0, 0.2, 0.5, 0.75), unit=unit)
    return ops, events, ops_dir, events_dir
