"""One micro-batch at the engine's edge: the input it accepts and the rows it returns.

Invariant: a row rejected as it is read keeps the record as it came (its raw text, else its
fields as JSON); one rejected after validation (``late``, ``duplicate_op_id``) has the fields
the operator read, as JSON, as on Spark; each carries exactly one reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..config import InputLimits
from ..contract import (
    COMPLETED,
    DUPLICATE_OP_ID,
    EVENT_COLUMNS,
    EXPIRED,
    LATE,
    OPERATION_COLUMNS,
    OUTCOME_COLUMNS,
    REJECTED_COLUMNS,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
    UNMATCHED_COLUMNS,
    WARNING_COLUMNS,
)
from .arrays import all_distinct, hash_strings
from .conditions import CONDITION_NAMES
from .fields import is_str
from .frames import concat, empty
from .list_fields import one_item_lists
from .rows import Rows
from .tables import EVENTS, OPS, RELAY, VERDICTS
from .validation import first_keys, raw_json, validate_events, validate_operations

if TYPE_CHECKING:
    from ..config import PurgatoryConfig
    from .snapshot import LiveTables

#: what ``process(..., validated=True)`` takes
VALID_OPERATIONS = {k: v for k, v in OPS.items() if k not in ("handle", "n_members")}
#: what a host that validated the operations may add to spare a pass over their lists:
#: ``one_key`` (every operation has this one key) and ``n_members`` (0 for none)
KEY_HINTS = {"one_key": "object", "n_members": "int64"}
VALID_EVENTS = {k: v for k, v in EVENTS.items() if k not in ("eseq", "used")}


@dataclass
class BatchResult:
    """Rows produced by one ``Purgatory.process`` call (times in ms)."""

    outcomes: pd.DataFrame
    unmatched: pd.DataFrame
    rejected: pd.DataFrame
    #: what a primary shard's stubs hand on to the cross-shard group
    relay: pd.DataFrame = field(default_factory=lambda: empty(RELAY))
    #: the registry's verdicts on other shards' claims of its op_ids
    verdicts: pd.DataFrame = field(default_factory=lambda: empty(VERDICTS))
    #: the operations warned (``contract.WARNINGS``' engine columns)
    warnings: pd.DataFrame = field(default_factory=lambda: Rows.empty(_NO_WARNINGS).to_frame(WARNING_COLUMNS))

    def with_warnings(self, warnings: list[Rows]) -> BatchResult:
        if warnings:
            self.warnings = Rows.concat(warnings, _NO_WARNINGS).to_frame(WARNING_COLUMNS)
        return self

    @property
    def completed(self) -> int:
        return int((self.outcomes["status"] == COMPLETED).sum())

    @property
    def expired(self) -> int:
        return int((self.outcomes["status"] == EXPIRED).sum())


def accepted(
    operations: pd.DataFrame | None,
    events: pd.DataFrame | None,
    validated: bool,
    max_timeout_ms: int,
    limits: InputLimits | None = None,
) -> tuple[Rows, Rows, list[pd.DataFrame]]:
    """The batch's rows as the engine takes them (validated unless the host did), and the rejected."""
    rejected: list[pd.DataFrame] = []
    if not validated:
        ops = operations if operations is not None else pd.DataFrame()
        operations, bad = validate_operations(ops, max_timeout_ms=max_timeout_ms, limits=limits)
        rejected.append(bad)
        events, bad = validate_events(events if events is not None else pd.DataFrame())
        rejected.append(bad)
    events = _taken(events, VALID_EVENTS, "replica", "cancel")
    return _taken(operations, VALID_OPERATIONS, "stub"), events, rejected


def _taken(frame: pd.DataFrame | None, dtypes: dict[str, str], *flags: str) -> Rows:
    """A valid frame's columns, ``flags`` False where absent, ``raw`` dropped (as on Spark)."""
    if frame is None or len(frame) == 0:
        return Rows.empty(dtypes)
    rows = Rows.of(frame.drop(columns="raw") if "raw" in frame.columns else frame)
    return rows.assign(**{flag: False for flag in flags if flag not in rows})


def with_keys(ops: pd.DataFrame | None) -> pd.DataFrame:
    """A text ``key`` column as shorthand for ``keys``: ``[key]`` where ``keys`` is missing."""
    if ops is None:
        return pd.DataFrame()
    if "key" not in ops.columns:
        return ops
    key = ops["key"].to_numpy(dtype=object)
    keys = ops["keys"].to_numpy(dtype=object) if "keys" in ops.columns else np.full(len(ops), None, object)
    take = pd.isna(keys) & is_str(key)
    keys = keys.copy()
    keys[take] = one_item_lists(key[take])
    return ops.drop(columns="key").assign(keys=keys)


def rejected_rows(source: str, rows: pd.DataFrame | Rows, reason: str) -> pd.DataFrame:
    """Rejected rows keep the record: its raw text when the source kept it, else its fields."""
    if isinstance(rows, Rows):
        rows = rows.to_frame()
    columns = OPERATION_COLUMNS if source == SOURCE_OPERATIONS else EVENT_COLUMNS
    if len(rows) and "raw" not in rows.columns and source == SOURCE_OPERATIONS:
        members = rows["members"].to_numpy(dtype=object)
        rows = rows.assign(
            timeout_ms=rows["deadline"] - rows["ts"],
            condition=CONDITION_NAMES[rows["cond"]],
            members=np.where([m is not None and len(m) > 0 for m in members], members, None),  # [] is none
        )
    elif "cancel" in rows.columns:  # an event's flag as given: none unless it cancels
        rows = rows.assign(cancel=np.where(rows["cancel"].to_numpy(dtype=bool), True, None))
    raw = raw_json(rows, columns) if len(rows) else pd.Series([], dtype=object)
    if source == SOURCE_OPERATIONS:
        op_id, key = rows["op_id"].to_numpy(dtype=object), first_keys(rows["keys"].to_numpy(dtype=object))
    else:
        op_id, key = rows["op_id"].to_numpy(dtype=object), rows["key"].to_numpy(dtype=object)
    return pd.DataFrame(
        {"source": source, "raw": raw.to_numpy(dtype=object), "reason": reason, "op_id": op_id, "key": key}
    )


def admit(
    operations: pd.DataFrame | None,
    events: pd.DataFrame | None,
    wm: int,
    validated: bool,
    config: PurgatoryConfig,
    t: LiveTables,
) -> tuple[Rows, Rows, list[pd.DataFrame]]:
    """What a shard admits at watermark ``wm`` (operations with ``ohash``, events) and rejects
    (``late``; an op_id pending, resolved or twice in the batch: ``duplicate_op_id``)."""
    t.resolved.retire(wm)  # a re-send is judged at its own micro-batch's watermark
    ops, evs, rejected = accepted(operations, events, validated, config.max_timeout_ms, config.input_limits)
    # stubs and replicas are copies: their original reports lateness and duplicates
    stub = ops["stub"].astype(bool, copy=False)
    late = ops["ts"] < wm
    if late.any():
        rejected.append(rejected_rows(SOURCE_OPERATIONS, ops.where(late & ~stub), LATE))
        ops, stub = ops.where(~late), stub[~late]
    ids = ops["op_id"].astype(object, copy=False)
    ohash = hash_strings(ids)
    dup = _repeated(ids, ohash, ops["ts"]) | t.resolved.contains(ohash)
    dup[t.pending.by_op_id(ids, ohash)[0]] = True
    if dup.any():
        rejected.append(rejected_rows(SOURCE_OPERATIONS, ops.where(dup & ~stub), DUPLICATE_OP_ID))
        ops, ohash = ops.where(~dup), ohash[~dup]
    ops = ops.assign(ohash=ohash)
    late = evs["ts"] < wm
    if late.any():
        rejected.append(rejected_rows(SOURCE_EVENTS, evs.where(late & ~evs["replica"].astype(bool)), LATE))
        evs = evs.where(~late)
    return ops, evs, rejected


def _repeated(ids: np.ndarray, hashes: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per op_id: is another copy in the batch kept (the earliest ``ts``, then the first)?"""
    if ids.size < 2 or all_distinct(hashes):
        return np.zeros(ids.size, dtype=bool)
    order = np.argsort(ts, kind="stable")
    repeated = np.empty(ids.size, dtype=bool)
    repeated[order] = pd.Series(ids[order], copy=False).duplicated().to_numpy()
    return repeated


#: the returned frames' columns when nothing was reported (as ``frames.concat`` of nothing)
_NO_OUTCOMES = {name: object for name in OUTCOME_COLUMNS}
_NO_WARNINGS = {name: object for name in WARNING_COLUMNS}
_NO_REJECTED = {**{name: object for name in REJECTED_COLUMNS[:-1]}, "batch_id": np.int64}


def result(
    outcomes: list[Rows],
    unmatched: Rows,
    rejected: list[pd.DataFrame],
    relay: Rows,
    batch_id: int,
    verdicts: Rows | None = None,
) -> BatchResult:
    """A call's ``BatchResult`` from its rows (the rejected ones without ``batch_id``)."""
    rejected = [r for r in rejected if len(r)]
    if rejected:
        rej = concat(rejected, REJECTED_COLUMNS[:-1])
        rej["batch_id"] = batch_id
        rej = rej[REJECTED_COLUMNS]
    else:
        rej = Rows.empty(_NO_REJECTED).to_frame()
    return BatchResult(
        Rows.concat(outcomes, _NO_OUTCOMES).to_frame(OUTCOME_COLUMNS),
        unmatched.to_frame(UNMATCHED_COLUMNS),
        rej,
        relay.to_frame(RELAY),
        (verdicts if verdicts is not None else Rows.empty(VERDICTS)).to_frame(VERDICTS),
    )
