"""A shard call's input as the engine takes it: the routed rows (``roles.ROUTED``) split
into validated operations, validated events, rows rejected at parse, op_id claims and the
operator's clock.

Each reader takes the columns it needs as numpy arrays, masked per role, and never copies
the whole frame.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from ..contract import SOURCE_EVENTS, SOURCE_OPERATIONS, ms_column
from ..engine.arrays import list_lengths, present
from ..engine.conditions import CONDITIONS
from ..engine.frames import concat, empty
from ..engine.registry import NO_REGISTRY
from ..engine.text import lists_of, object_column
from ..engine.validation import first_keys, readable
from .roles import (
    ROLE_BAD,
    ROLE_CLAIM,
    ROLE_CLOCK,
    ROLE_EVENT,
    ROLE_MARK,
    ROLE_OPERATION,
    ROLE_REPLICA,
    ROLE_STUB,
    ROLES,
    ROUTED_COLUMNS,
    SHARED_IN,
    SIDES,
)

_TS_MS = ms_column("ts")
_SIDE_NAMES = np.array(SIDES, dtype=object)
#: the roles as the routed rows carry them: their places in ``roles.ROLES``
_OPERATION, _STUB, _EVENT, _REPLICA, _BAD, _CLAIM, _CLOCK, _MARK = (
    ROLES.index(role)
    for role in (
        ROLE_OPERATION,
        ROLE_STUB,
        ROLE_EVENT,
        ROLE_REPLICA,
        ROLE_BAD,
        ROLE_CLAIM,
        ROLE_CLOCK,
        ROLE_MARK,
    )
)


#: the rows rejected at parse, as ``split_input`` gives them
_BAD_COLUMNS = dict.fromkeys(("source", "raw", "reason", "op_id", "key"), "object")


#: each input's own role and its copies': the rows whose time went through its watermark
INPUT_ROLES = {SOURCE_OPERATIONS: (_OPERATION, _STUB), SOURCE_EVENTS: (_EVENT, _REPLICA)}


def roles_of(pdf: pd.DataFrame) -> np.ndarray:
    """The routed rows' roles, as their places in ``roles.ROLES``."""
    return pdf["role"].to_numpy(np.int8)


def keys_of(key: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Each operation's keys as a list: its JSON ``keys`` where given, else its one ``key``
    (none: an empty list); only the rows with several keys parse JSON.

    >>> keys_of(np.array(["a", None, None], dtype=object),
    ...         np.array([None, '["b","c"]', None], dtype=object)).tolist()
    [['a'], ['b', 'c'], []]
    """
    listed = present(keys)
    one = present(key) & ~listed
    if one.all():  # one key each: the usual batch, no gather of the keys first
        return lists_of(np.ones(len(key), np.int64), key)
    out = lists_of(one.astype(np.int64), key[one])
    if listed.any():
        out[listed] = object_column([json.loads(text) for text in keys[listed]])
    return out


def members_of(members: np.ndarray) -> np.ndarray:
    """Each operation's members as a list, None where it has none (absent, as the engine reads it).

    >>> members_of(np.array([None, '["x","y"]'], dtype=object)).tolist()
    [None, ['x', 'y']]
    """
    out = np.full(len(members), None, dtype=object)
    given = present(members)
    if given.any():
        out[given] = object_column([json.loads(text) for text in members[given]])
    return out


def condition_codes(names: np.ndarray) -> np.ndarray:
    """Condition names as the engine's codes (``conditions.CONDITIONS``), looked up once per
    distinct name; a name outside the contract (never: the rows are validated) is a ``KeyError``.

    >>> condition_codes(np.array(["any", "count", "any"], dtype=object)).tolist()
    [0, 1, 0]
    >>> condition_codes(np.array(["count", "count"], dtype=object)).tolist()
    [1, 1]
    """
    if names.size and isinstance(names[0], str) and bool((names == names[0]).all()):
        return np.full(names.size, CONDITIONS[names[0]], np.int8)
    at, distinct = pd.factorize(names, use_na_sentinel=False)
    return np.array([CONDITIONS[name] for name in distinct], np.int8)[at]


def split_input(
    pdf: pd.DataFrame, registering: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Routed rows -> (validated operations, validated events, rejected-at-parse rows); with
    ``registering`` the operations carry their op_id's ``registry`` shard."""
    role = roles_of(pdf)
    is_op = np.flatnonzero((role == _OPERATION) | (role == _STUB))
    ts = pdf[_TS_MS].to_numpy()

    def col(name: str, rows: np.ndarray, dtype: Any = object) -> np.ndarray:
        return pdf[name].to_numpy(dtype=dtype)[rows]

    op_ts = ts[is_op].astype(np.int64)
    deadline = op_ts + pdf["timeout_ms"].to_numpy()[is_op].astype(np.int64)
    key, keys = col("key", is_op), col("keys", is_op)
    members = members_of(col("members", is_op))
    columns = {
        "op_id": col("op_id", is_op),
        "keys": keys_of(key, keys),
        "ts": op_ts,
        "deadline": deadline,
        "cond": condition_codes(col("condition", is_op)),
        "target": col("target", is_op, float),
        "members": members,
        "payload": col("payload", is_op),
        "stub": role[is_op] == _STUB,
        "warn_at": deadline - col("warn_ms", is_op, float),  # NaN: no warning asked
        # what the engine would count again from the lists (``batch.KEY_HINTS``)
        "n_members": list_lengths(members),
    }
    if key.size and not present(keys).any() and present(key).all():  # one key each, as routing sends it
        columns["one_key"] = key
    # fresh arrays: no block to consolidate them into (a copy of every value)
    ops = pd.DataFrame(columns, copy=False)
    if registering:
        peer = col("peer", is_op, float)  # null: none given (decided where it is)
        ops["registry"] = np.where(np.isnan(peer), NO_REGISTRY, peer).astype(np.int64)
    is_event = np.flatnonzero((role == _EVENT) | (role == _REPLICA))
    events = pd.DataFrame(
        {
            "key": col("key", is_event),
            "ts": ts[is_event].astype(np.int64),
            "op_id": col("op_id", is_event),
            "source": col(SHARED_IN["source"], is_event),
            "value": col(SHARED_IN["value"], is_event, float),
            "replica": role[is_event] == _REPLICA,
            "cancel": col("cancel", is_event, bool),
        },
        copy=False,
    )
    is_bad = role == _BAD
    if not is_bad.any():  # the usual call: no row rejected at parse
        return ops, events, empty(_BAD_COLUMNS)
    key = col("key", is_bad)
    side = _SIDE_NAMES[pdf["side"].to_numpy(np.int64)[is_bad]]
    operation_key = first_keys(keys_of(key, col("keys", is_bad)))  # an operation's; an event's is its key
    bad = pd.DataFrame(
        {
            "source": side,
            "raw": col(SHARED_IN["raw"], is_bad),
            "reason": col(SHARED_IN["reason"], is_bad),
            "op_id": readable(col("op_id", is_bad)),
            "key": readable(np.where(side == SOURCE_OPERATIONS, operation_key, key)),
        },
        copy=False,
    )
    return ops, events, bad


def claims_of(pdf: pd.DataFrame) -> pd.DataFrame | None:
    """The claims among the routed rows (``tables.CLAIMS``), None when there are none."""
    c = pdf.loc[roles_of(pdf) == _CLAIM]
    if len(c) == 0:
        return None
    ts = c[_TS_MS].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "op_id": c["op_id"].to_numpy(dtype=object),
            "ts": ts,
            "deadline": ts + c["timeout_ms"].to_numpy(np.int64),
            "home": c["peer"].to_numpy(np.int64),
        },
        copy=False,
    )


def routed_rows(pdfs: Iterator[pd.DataFrame]) -> pd.DataFrame:
    """A group's input chunks as one frame with ``ROUTED_COLUMNS``, stacked column by column
    (``pd.concat`` tests every value of all-null object columns); a single chunk as PySpark
    made it (every reader takes its columns by name)."""
    chunks = [f for f in pdfs if len(f)]
    if len(chunks) == 1:
        return chunks[0]
    return concat(chunks, ROUTED_COLUMNS)  # only these columns, taken from each chunk


def clock_of(pdf: pd.DataFrame) -> int | None:
    """The operator's clock a clock row (``handoff.reaper``) brings, if any."""
    clock = pdf[_TS_MS].to_numpy()[roles_of(pdf) == _CLOCK]
    return int(np.max(clock)) if len(clock) else None


def proposed_watermarks(pdf: pd.DataFrame, delays_ms: dict[str, int]) -> dict[str, int | None]:
    """The watermark each input's rows in the call propose: their largest event time minus
    that input's delay (None: no row of it).  Only rows whose time Spark's watermark saw count,
    and the input's marks, which make the proposal the one Spark computes over every shard.

    >>> times = [5_000, 9_000, 7_000, 99_000]  # an operation, two events, a row rejected at parse
    >>> rows = pd.DataFrame({"role": [0, 2, 2, 4], "side": [0, 1, 1, 1], "ts_ms": times})
    >>> proposed_watermarks(rows, {"operations": 1_000, "events": 2_000})
    {'operations': 4000, 'events': 7000}
    >>> marked = pd.concat([rows, pd.DataFrame({"role": [9], "side": [1], "ts_ms": [12_000]})])
    >>> proposed_watermarks(marked, {"operations": 1_000, "events": 2_000})  # another shard's event
    {'operations': 4000, 'events': 10000}
    """
    role, side = roles_of(pdf), pdf["side"].to_numpy(np.int8)
    ts = pdf[_TS_MS].to_numpy()
    proposed: dict[str, int | None] = {}
    for source, (own, copy) in INPUT_ROLES.items():
        timed = ts[(side == SIDES.index(source)) & ((role == own) | (role == copy) | (role == _MARK))]
        proposed[source] = int(np.max(timed)) - delays_ms[source] if len(timed) else None
    return proposed


def marks_in(pdf: pd.DataFrame) -> int:
    """How many of the routed rows are marks (``roles.ROLE_MARK``): rows of no input."""
    return int(np.count_nonzero(roles_of(pdf) == _MARK))


def batch_watermark(proposed: dict[str, int | None]) -> int | None:
    """How far the operator's watermark may go inside the micro-batch whose rows (of one shard)
    ``proposed`` these watermarks (``proposed_watermarks``): the smallest of them, None unless
    both inputs sent the shard a row.

    Spark applies a micro-batch's watermark in the next one: per input the largest event
    time minus its delay over *every* row, then the smallest or largest of the two (``min`` /
    ``max``), never moving back.  Each is at least this shard's proposal, so the smallest
    proposal is at most Spark's next watermark under either policy: a shard that moves there
    after admitting its rows expires now what the next micro-batch would, and makes late only
    rows the next one makes late in every shard.

    >>> batch_watermark({"operations": 4_000, "events": 7_000})
    4000
    >>> batch_watermark({"operations": 4_000, "events": None}) is None
    True
    """
    values = list(proposed.values())
    return None if any(v is None for v in values) else min(v for v in values if v is not None)
