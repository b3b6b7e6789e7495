"""Spark's part of a micro-batch, played in-process: routing to shards, one ``ShardStep`` per group.

The host around the production shard step that Spark is in a stream: **routing** (the rows
``spark.routing`` sends), **groups called as Spark calls them** (with rows, or with a passed
timeout), **the wake** and end rows, and **the marks** the JAR's generator sends.

Invariant: a group's call sees what it would see on Spark for the same micro-batches (the same
routed rows, stored value, watermark and the mailbox's files); only the batch times are a
counter, not the wall clock.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa

from ..config import PurgatoryConfig
from ..contract import SOURCE_EVENTS, SOURCE_OPERATIONS, ms_column
from ..engine.conditions import CONDITION_NAMES
from ..handoff.shard_handoff import hands_off, registers
from ..shard.roles import (
    FLAGS,
    ROLE_BAD,
    ROLE_CLAIM,
    ROLE_END,
    ROLE_EVENT,
    ROLE_MARK,
    ROLE_OPERATION,
    ROLE_REPLICA,
    ROLE_STUB,
    ROLE_WAKE,
    ROLES,
    ROUTED,
    ROUTED_COLUMNS,
    SHARED_IN,
    SIDES,
)
from ..shard.step import ShardResult, ShardStep
from ..spark.group_state import call_group, keep_group, shard_bytes
from ..spark.key_hash import registry_of, shards_of, text_shard

_TS_MS = ms_column("ts")
#: the routed columns that hold numbers (the others text)
_NUMBERS = {f.name for f in ROUTED if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)}
#: a micro-batch's time: a counter in steps of a second (the mailbox's names, state versions)
_BATCH_STEP_MS = 1_000


def routed(
    operations: pd.DataFrame,
    events: pd.DataFrame,
    rejected: pd.DataFrame,
    config: PurgatoryConfig,
) -> pd.DataFrame:
    """Validated ``operations`` and ``events`` and the rows ``rejected`` at parse, routed as
    ``spark.routing`` routes a stream's input (``shard`` the number, not its Spark label)."""
    shards, delimiter = int(config.shards), config.shard_key_delimiter
    registering = registers(config)
    rows: list[dict] = []
    for op in operations.itertuples(index=False):
        keys = list(op.keys)
        of_key = shards_of(np.asarray(keys, dtype=object), shards, delimiter)
        homes = list(dict.fromkeys(of_key.tolist()))  # in the keys' order, as routing's
        fields = _operation_fields(op)
        if len(homes) > 1 and not config.cross_shard_operations:
            raw = op.raw if hasattr(op, "raw") else json.dumps(_record(op))
            rows.append(_bad(SOURCE_OPERATIONS, "cross_shard_keys", raw, op.op_id, keys[0], shards))
            continue
        home = shards if len(homes) > 1 else homes[0]
        registry = registry_of(op.op_id, shards) if registering and len(homes) == 1 else -1
        rows.append({**fields, **_keys(keys), "shard": home, "role": ROLE_OPERATION, "peer": registry})
        if len(homes) > 1:
            for s in homes:
                own = [k for k, ks in zip(keys, of_key.tolist(), strict=True) if ks == s]
                rows.append({**fields, **_keys(own), "shard": s, "role": ROLE_STUB, "peer": None})
        if registry >= 0 and registry != home:
            rows.append({**fields, **_keys(keys), "shard": registry, "role": ROLE_CLAIM, "peer": home})
    replicas = config.cross_shard_operations and shards > 1 and not hands_off(config)
    if len(events):
        homes = shards_of(events["key"].to_numpy(dtype=object), shards, delimiter).tolist()
        for ev, home in zip(events.itertuples(index=False), homes, strict=True):
            fields = {
                "side": SOURCE_EVENTS,
                "key": ev.key,
                _TS_MS: int(ev.ts),
                "op_id": ev.op_id,
                SHARED_IN["source"]: ev.source,
                SHARED_IN["value"]: ev.value,
                "cancel": bool(ev.cancel),
            }
            rows.append({**fields, "shard": home, "role": ROLE_EVENT})
            if replicas:
                rows.append({**fields, "shard": shards, "role": ROLE_REPLICA})
    for bad in rejected.itertuples(index=False):
        rows.append(_bad(bad.source, bad.reason, bad.raw, bad.op_id, bad.key, shards))
    return _frame(rows)


def _operation_fields(op) -> dict:
    """An operation's routed columns but its shard, role, peer and keys."""
    members = list(op.members) if op.members is not None else []
    return {
        "side": SOURCE_OPERATIONS,
        "op_id": op.op_id,
        _TS_MS: int(op.ts),
        "timeout_ms": int(op.deadline) - int(op.ts),
        "condition": CONDITION_NAMES[int(op.cond)],
        "target": op.target,
        "members": _json(members) if members else None,
        "payload": op.payload,
        "warn_ms": None if np.isnan(op.warn_at) else int(op.deadline - op.warn_at),
    }


def _keys(keys: list[str]) -> dict:
    """One key in ``key``, several as JSON text in ``keys`` (``roles.LIST_COLUMNS``)."""
    return {"key": keys[0], "keys": None} if len(keys) == 1 else {"key": None, "keys": _json(keys)}


def _json(values: list) -> str:
    """A list as JSON text, as Spark's ``to_json`` writes it (no spaces)."""
    return json.dumps(values, separators=(",", ":"), ensure_ascii=False)


def _record(op) -> dict:
    return {
        "op_id": op.op_id,
        "keys": list(op.keys),
        "ts": int(op.ts),
        "timeout_ms": int(op.deadline - op.ts),
    }


def _bad(side: str, reason: str, raw, op_id, key, shards: int) -> dict:
    """A row rejected at parse, for the shard of its raw text."""
    return {
        "shard": text_shard(raw, shards),
        "role": ROLE_BAD,
        "side": side,
        SHARED_IN["reason"]: reason,
        SHARED_IN["raw"]: raw,
        "op_id": op_id,
        "key": key,
        _TS_MS: 0,
    }


def _frame(rows: list[dict]) -> pd.DataFrame:
    """The rows with ``ROUTED_COLUMNS``, roles and sides as their places in ``ROLES``/``SIDES``."""
    data: dict[str, np.ndarray] = {}
    for name in ROUTED_COLUMNS:
        values = [row.get(name) for row in rows]
        if name == "role":
            data[name] = np.array([ROLES.index(r) for r in values], dtype=np.int8)
        elif name == "side":
            data[name] = np.array([SIDES.index(s) if s is not None else 0 for s in values], dtype=np.int8)
        elif name in FLAGS:
            data[name] = np.array([bool(v) for v in values], dtype=bool)
        elif name in _NUMBERS:  # a null as NaN, as PySpark hands a nullable number column over
            data[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        else:
            data[name] = np.array(values, dtype=object)
    return pd.DataFrame(data, copy=False)


def _marks(rows: pd.DataFrame, shards: int) -> list[dict]:
    """Each input's largest event time over ``rows`` (rows rejected at parse not counted), as a
    mark for every primary shard."""
    role, side = rows["role"].to_numpy(np.int8), rows["side"].to_numpy(np.int8)
    ts = rows[_TS_MS].to_numpy(np.float64)
    timed = (role != ROLES.index(ROLE_BAD)) & ~np.isnan(ts)
    out = []
    for source in (SOURCE_OPERATIONS, SOURCE_EVENTS):
        mine = timed & (side == SIDES.index(source))
        if mine.any():
            latest = int(ts[mine].max())
            out += [{"shard": g, "role": ROLE_MARK, "side": source, _TS_MS: latest} for g in range(shards)]
    return out


class LocalGroupState:
    """One group's state in process, as Spark's ``GroupState`` shows it to a call: the value
    its last call stored and the two clocks.  As on Spark, a timeout lasts until the next
    call, which sets its own or none."""

    def __init__(self) -> None:
        self.value: str | bytes | None = None
        self.timeout_ms: int | None = None
        self._clocks = (0, 0)

    def due(self, watermark_ms: int) -> bool:
        """Has the micro-batch's watermark passed the group's timeout (Spark calls it then)?"""
        return self.timeout_ms is not None and watermark_ms > self.timeout_ms

    def called(self, watermark_ms: int, batch_time_ms: int) -> LocalGroupState:
        """The state as a call at these clocks sees it."""
        self._clocks, self.timeout_ms = (watermark_ms, batch_time_ms), None
        return self

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple:
        return (self.value,)

    def getCurrentWatermarkMs(self) -> int:
        return self._clocks[0]

    def getCurrentProcessingTimeMs(self) -> int:
        return self._clocks[1]

    def update(self, value: tuple) -> None:
        self.value = value[0]

    def remove(self) -> None:
        self.value, self.timeout_ms = None, None

    def setTimeoutTimestamp(self, timestamp_ms: int) -> None:
        self.timeout_ms = int(timestamp_ms)


class LocalShards:
    """Every shard group of one query, each with the value its last call stored and its
    timeout, called micro-batch by micro-batch as Spark calls them.

    ``config`` must name a state path (the mailbox and the state's files live there).
    ``batch_watermark``: the shards move to the watermark each micro-batch's rows bring, as on
    Spark; that needs each ``run``'s watermark to be the one Spark computes from the rows
    before it, so a host that moves the watermark by hand leaves it off."""

    def __init__(self, config: PurgatoryConfig, *, batch_watermark: bool = False) -> None:
        self.config = config
        self.step = ShardStep(config, batch_watermark=batch_watermark)
        self.marks = batch_watermark
        self.groups = config.groups
        self.states = {group: LocalGroupState() for group in range(self.groups)}
        self.batch_time_ms = 0
        self.owes_wake = False  # the last micro-batch posted to the mailbox: a wake row is owed

    def run(self, rows: pd.DataFrame, watermark_ms: int, *, end: bool = False) -> list[ShardResult]:
        """One micro-batch: ``rows`` routed (``routed``) at Spark's watermark ``watermark_ms``;
        ``end``: the end of input reaches every group.  Returns each called group's result."""
        self.batch_time_ms += _BATCH_STEP_MS
        extra = []
        if end:
            extra = [{"shard": g, "role": ROLE_END} for g in range(self.groups)]
        elif self.owes_wake:
            woken = range(self.groups) if registers(self.config) else [self.config.shards]
            extra = [{"shard": g, "role": ROLE_WAKE} for g in woken]
        if self.marks and len(rows):
            extra += _marks(rows, int(self.config.shards))
        if extra:
            rows = pd.concat([rows, _frame(extra)], ignore_index=True) if len(rows) else _frame(extra)
        shard_of = rows["shard"].to_numpy(np.int64) if len(rows) else np.zeros(0, np.int64)
        done = []
        for group, state in self.states.items():
            mine = rows.loc[shard_of == group].reset_index(drop=True)
            if not len(mine) and not state.due(watermark_ms):
                continue  # Spark calls a group with rows, or one whose timeout passed
            result = call_group(self.step, group, mine, state.called(watermark_ms, self.batch_time_ms))
            keep_group(state, result, "binary")  # in process: the bytes as they are, no base64
            done.append(result)
        self.owes_wake = any(r.relayed for r in done)
        return done

    @property
    def values(self) -> dict[int, bytes]:
        """The value each group's last call stored (groups without state left out)."""
        return {g: shard_bytes(state.value) for g, state in self.states.items() if state.value is not None}
