"""A watermark per Kafka partition: a backlog read at any cap judges what the uncapped run judges.

Spark's Kafka source cuts a capped micro-batch (``maxOffsetsPerTrigger``) by backlog, not by
event time, so partitions that fill at different rates are read far apart in event time and
the slow partition's rows would be ``late``.  Like Flink's Kafka source, this module keeps a
watermark per partition and takes the minimum:

* each shard call reports its largest event time per (input, Kafka partition);
* after micro-batch N the driver (``PartitionWatermarks.observe``) moves the input's
  watermark to ``min(largest event time of each partition that sent rows in N) - delay``
  (never back), written to ``<purgatory.state.path>/watermarks/<N's key>.json``;
* every shard call of micro-batch N + 1 runs at ``min(Spark's watermark, cap_before(...))``.

A micro-batch is keyed by its timestamp, so a replay reads the file it read the first time.

Example (delay 15 s; partitions 1 and 2 of the operations' topic)::

    clock = PartitionWatermarks("/chk/purgatory-state/watermarks", {"operations": 15_000})
    clock.observe(1_000, [maxima_text({"operations": {1: 100_000, 2: 57_000}})])
    # {'operations': 42_000}: partition 2 holds the watermark, written for key 1_000
    cap_before("/chk/purgatory-state/watermarks", 2_000)   # 42_000, for micro-batch 2_000

Invariant: the value only grows, and a shard never runs past the slowest partition that sent
rows in the micro-batch before its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from ..checkpoint_paths import StatePath
from ..storage import Storage, numbered, read_bytes, write_whole

#: a file of the watermarks directory (``StatePath.watermarks``), named by its micro-batch
_NAME = re.compile(r"^(\d{15})\.json$")
#: files kept: a replay reads the last or the one before it
_KEEP = 3


def maxima_text(by_input: Mapping[str, Mapping[int, int]]) -> str | None:
    """A shard call's largest event time per (input, partition), as its metrics row carries
    it; None when none of its rows came from Kafka."""
    kept = {
        source: {str(int(p)): int(ts) for p, ts in parts.items()}
        for source, parts in by_input.items()
        if parts
    }
    return json.dumps(kept, separators=(",", ":"), sort_keys=True) if kept else None


def read_maxima(texts: Iterable[str | None]) -> dict[str, dict[str, int]]:
    """The shard calls' ``maxima_text`` merged: each partition's largest event time."""
    merged: dict[str, dict[str, int]] = {}
    for text in texts:
        if not text:
            continue
        for source, parts in json.loads(text).items():
            seen = merged.setdefault(source, {})
            for part, ts in parts.items():
                seen[part] = max(seen.get(part, ts), int(ts))
    return merged


class PartitionWatermarks:
    """The driver's side: each partition's largest event time, each input's watermark."""

    def __init__(self, root: str, delays_ms: Mapping[str, int], storage: Storage | None = None) -> None:
        self.root = root
        self.delays_ms = {source: int(delay) for source, delay in delays_ms.items()}
        self.storage = storage or Storage()
        #: input -> partition -> largest event time so far
        self.maxima: dict[str, dict[str, int]] = {}
        #: input -> its watermark after the last micro-batch seen
        self.watermarks: dict[str, int] = {}
        self._loaded = False

    @classmethod
    def beside(
        cls, state_path: str, delays_ms: Mapping[str, int], storage: Storage | None = None
    ) -> PartitionWatermarks:
        return cls(StatePath(state_path).watermarks, delays_ms, storage)

    def observe(self, batch_key: int, texts: Iterable[str | None]) -> dict[str, int]:
        """Move the inputs' watermarks by micro-batch ``batch_key``'s maxima, post them."""
        batch = read_maxima(texts)
        if not batch:  # no Kafka rows (file inputs: never; no file is read or written)
            return dict(self.watermarks)
        if not self._loaded:  # a restart: from the file before the first micro-batch seen
            self._loaded = True
            found = _latest(self.storage, self.root, before=int(batch_key))
            if found is not None:
                self.maxima = {s: dict(p) for s, p in found.get("maxima", {}).items()}
                self.watermarks = {s: int(w) for s, w in found.get("watermarks", {}).items()}
        for source, parts in batch.items():
            seen = self.maxima.setdefault(source, {})
            for part, ts in parts.items():
                seen[part] = max(seen.get(part, ts), ts)
            candidate = min(seen[part] for part in parts) - self.delays_ms.get(source, 0)
            before = self.watermarks.get(source)
            self.watermarks[source] = candidate if before is None else max(before, candidate)
        self._post(int(batch_key))
        return dict(self.watermarks)

    def _post(self, batch_key: int) -> None:
        fs, root = self.storage.filesystem(self.root)
        fs.create_dir(root, recursive=True)
        data = json.dumps({"watermarks": self.watermarks, "maxima": self.maxima}, sort_keys=True).encode()
        write_whole(fs, f"{root}/{batch_key:015d}.json", lambda out: out.write(data))
        for _, name in _files(fs, root)[:-_KEEP]:
            try:
                fs.delete_file(f"{root}/{name}")
            except (FileNotFoundError, OSError):  # gone already
                pass


_caps: dict[tuple[str, int], int | None] = {}  # (root, batch key) -> cap, in this worker


def cap_before(root: str, batch_key: int, storage: Storage | None = None) -> int | None:
    """The watermark the driver posted for micro-batch ``batch_key`` (the smallest input's),
    read once per worker; None before the first."""
    cached = (root, int(batch_key))
    if cached not in _caps:
        found = _latest(storage or Storage(), root, before=int(batch_key))
        values = [int(w) for w in (found or {}).get("watermarks", {}).values()]
        if len(_caps) > 64:
            _caps.clear()
        _caps[cached] = min(values) if values else None
    return _caps[cached]


def _latest(storage: Storage, root: str, *, before: int) -> dict | None:
    fs, directory = storage.filesystem(root)
    earlier = [name for key, name in _files(fs, directory) if key < before]
    if not earlier:
        return None
    return json.loads(read_bytes(fs, f"{directory}/{earlier[-1]}").decode())


def _files(fs, directory: str) -> list[tuple[int, str]]:
    return [(key, name) for (key,), name in numbered(fs, directory, _NAME)]
