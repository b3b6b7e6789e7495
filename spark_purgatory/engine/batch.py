"""One micro-batch at the engine's edge: the input it accepts and the rows it returns.

``Purgatory.process`` takes operations and events either canonical (validated here, with
``engine.validation``) or already validated by the host (``VALID_OPERATIONS`` /
``VALID_EVENTS``), and returns a ``BatchResult`` with the three output tables' engine
columns (``contract``).

Invariant: a rejected row keeps the record as it came (its raw text, else its fields as
JSON) and carries exactly one reason from ``contract.REASONS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..contract import (
    COMPLETED,
    DUPLICATE_OP_ID,
    EVENT_COLUMNS,
    EXPIRED,
    LATE,
    OPERATION_COLUMNS,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
)
from .conditions import CONDITION_NAMES
from .frames import empty, frame_or_empty, hash_strings, rows_where
from .tables import EVENTS, OPS, RELAY
from .validation import first_keys, raw_json, validate_events, validate_operations

if TYPE_CHECKING:
    from .dedup import ResolvedTable
    from .pending import Pending

__all__ = [
    "BatchResult",
    "VALID_OPERATIONS",
    "VALID_EVENTS",
    "accepted",
    "admit",
    "with_keys",
    "rejected_rows",
]

#: what ``process(..., validated=True)`` takes: the ops table without the engine's own columns
VALID_OPERATIONS = {k: v for k, v in OPS.items() if k not in ("handle", "n_members")}
#: ... and the events it takes
VALID_EVENTS = {k: v for k, v in EVENTS.items() if k not in ("eseq", "used")}


@dataclass
class BatchResult:
    """Rows produced by one ``Purgatory.process`` call, with the SPEC's columns (times in ms)."""

    outcomes: pd.DataFrame
    unmatched: pd.DataFrame
    rejected: pd.DataFrame
    #: what a primary shard's stubs hand on to the cross-shard group (``tables.RELAY``)
    relay: pd.DataFrame = field(default_factory=lambda: empty(RELAY))

    @property
    def completed(self) -> int:
        return int((self.outcomes["status"] == COMPLETED).sum())

    @property
    def expired(self) -> int:
        return int((self.outcomes["status"] == EXPIRED).sum())


def accepted(
    operations: pd.DataFrame | None, events: pd.DataFrame | None, validated: bool, max_timeout_ms: int
) -> tuple[pd.DataFrame, pd.DataFrame, list[pd.DataFrame]]:
    """The batch's operations and events as the engine takes them (validated here unless the
    host did; ``stub`` and ``replica`` False where absent), and the rows validation rejected."""
    rejected: list[pd.DataFrame] = []
    if validated:
        ops = frame_or_empty(operations, VALID_OPERATIONS)
        evs = frame_or_empty(events, VALID_EVENTS)
    else:
        ops, bad = validate_operations(with_keys(operations), max_timeout_ms=max_timeout_ms)
        rejected.append(bad)
        evs, bad = validate_events(events if events is not None else pd.DataFrame())
        rejected.append(bad)
    if "stub" not in ops.columns:
        ops["stub"] = False
    if "replica" not in evs.columns:
        evs["replica"] = False
    return ops, evs, rejected


def with_keys(ops: pd.DataFrame | None) -> pd.DataFrame:
    """Accept a single ``key`` column as shorthand for ``keys``: where ``keys`` is missing, a
    text ``key`` becomes the one-element list ``[key]`` (anything else stays missing)."""
    if ops is None:
        return pd.DataFrame()
    if "key" not in ops.columns:
        return ops
    key = ops["key"].to_numpy(dtype=object)
    keys = ops["keys"].to_numpy(dtype=object) if "keys" in ops.columns else np.full(len(ops), None, object)
    take = pd.isna(keys) & _is_text(key)
    keys = keys.copy()
    # one list per row is the point; tolist + fromiter make them without a Python step per row
    keys[take] = np.fromiter(key[take].reshape(-1, 1).tolist(), dtype=object, count=int(take.sum()))
    return ops.drop(columns="key").assign(keys=keys)


def _is_text(values: np.ndarray) -> np.ndarray:
    """Which values are ``str``: one C pass when the column is text (the usual case)."""
    if pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
        return ~pd.isna(values)
    return np.fromiter((isinstance(v, str) for v in values), dtype=bool, count=len(values))


def rejected_rows(source: str, rows: pd.DataFrame, reason: str) -> pd.DataFrame:
    """Rejected rows keep the record: its raw text when the source kept it, else its fields."""
    columns = OPERATION_COLUMNS if source == SOURCE_OPERATIONS else EVENT_COLUMNS
    if len(rows) and "raw" not in rows.columns and source == SOURCE_OPERATIONS:
        rows = rows.assign(timeout_ms=rows["deadline"] - rows["ts"], condition=CONDITION_NAMES[rows["cond"]])
    raw = raw_json(rows, columns) if len(rows) else pd.Series([], dtype=object)
    if source == SOURCE_OPERATIONS:  # valid rows: op_id text, keys sorted (rejected's op_id, key)
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
    max_timeout_ms: int,
    resolved: ResolvedTable,
    pending: Pending,
) -> tuple[pd.DataFrame, pd.DataFrame, list[pd.DataFrame]]:
    """What a shard takes of a batch at watermark ``wm``: the input validated (unless the host
    did), rows behind the watermark rejected ``late`` and op_ids already ``pending`` or
    ``resolved`` (or twice in the batch) rejected ``duplicate_op_id``.  Returns the admitted
    operations (with their op_ids' hashes, ``ohash``), the admitted events and the rejected
    rows."""
    ops, evs, rejected = accepted(operations, events, validated, max_timeout_ms)
    # stubs and replicas are copies: their original reports lateness and duplicates
    stub = ops["stub"].to_numpy(bool)
    late = ops["ts"].to_numpy() < wm
    rejected.append(rejected_rows(SOURCE_OPERATIONS, ops.loc[late & ~stub], LATE))
    ops = rows_where(ops, ~late)  # the same frame when nothing is late (no copy)
    ids = ops["op_id"].to_numpy(dtype=object)
    ohash = hash_strings(ids)  # once: the lookups here and the op_id index both need it
    dup = ops["op_id"].duplicated().to_numpy() | resolved.contains(ohash)
    dup[pending.by_op_id(ids, ohash)[0]] = True
    copies = ops["stub"].to_numpy(bool)
    rejected.append(rejected_rows(SOURCE_OPERATIONS, ops.loc[dup & ~copies], DUPLICATE_OP_ID))
    ops = rows_where(ops, ~dup)
    ops["ohash"] = ohash[~dup]
    late = evs["ts"].to_numpy() < wm
    rejected.append(rejected_rows(SOURCE_EVENTS, evs.loc[late & ~evs["replica"].to_numpy(bool)], LATE))
    return ops, rows_where(evs, ~late), rejected
