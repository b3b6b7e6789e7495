"""The shard's tables, their columns, and the two views the state layer gets of them.

Three tables grow with the pending operations (``BIG_TABLES``); the others stay small
(``SMALL_TABLES``).  The engine persists nothing: a persistence layer reads ``ShardTables``
(every table, counter and the wheel at once) or ``Changes`` (what the big tables gained and
lost since it last asked), as plain frames in handle order.

Invariants: a row of ``ops``, ``watch`` and ``matches`` belongs to one pending operation,
named by its ``handle``; handles only grow, so "added since" is "handle >= the next handle
then".  ``resolved`` rows have no handle; the change log lists the ones added.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .arrays import distinct, list_lengths
from .frames import empty
from .rows import Rows
from .wheel import TimingWheel

I64_MIN = np.iinfo(np.int64).min

#: one row per pending operation, sorted by handle
OPS = {
    "handle": "int64",
    "op_id": "object",
    "keys": "object",
    "ts": "int64",
    "deadline": "int64",
    "cond": "int8",
    "target": "float64",
    "members": "object",
    "payload": "object",
    "n_members": "int64",
    "stub": "bool",
    # ``deadline - warn_ms`` (NaN: no warning asked; in a state written before it too)
    "warn_at": "float64",
}
#: Kafka's Watchers: (key hash, key, operation) sorted by hash; ``progress_at_watch`` is the
#: key's offset progress when an ``offset`` operation started watching it (NaN otherwise)
WATCH = {"hash": "uint64", "key": "object", "handle": "int64", "progress_at_watch": "float64"}
#: (event, pending operation) pairs inside the operation's window
MATCHES = {
    "handle": "int64",
    "khash": "uint64",
    "ts": "int64",
    "eseq": "int64",
    "value": "float64",
    "source": "object",
    "is_member": "bool",
    "cancel": "bool",
}
#: events the watermark has not passed yet, in arrival order (``eseq``); ``used``: an
#: operation of this shard counted it (a stub never counts: ``relay``); ``cancel``: a cancel
#: event (``cancels``), which withdraws and never counts (False in a state written before it: ``codec``)
EVENTS = {
    "eseq": "int64",
    "key": "object",
    "ts": "int64",
    "op_id": "object",
    "source": "object",
    "value": "float64",
    "used": "bool",
    "replica": "bool",
    "cancel": "bool",
}
#: what a primary shard hands on to the cross-shard group (``relay``): each (event, stub)
#: match, the stub named by its operation (``for_op``), the event by its fields and its
#: ``eseq`` in the sender; ``stage`` 0 when the event was buffered before its stub came, 1
#: when new, 2 for a *notice* (the event became final in the sender: ``counted`` by one of its
#: operations, ``covered`` by one of its windows); ``floor`` rows carry a key's progress in ``value``
RELAY = {
    "for_op": "object",
    "key": "object",
    "ts": "int64",
    "op_id": "object",
    "source": "object",
    "value": "float64",
    "stage": "int8",
    "floor": "bool",
    "sender_eseq": "int64",
    "counted": "bool",
    "covered": "bool",
    "cancel": "bool",
}
#: the cross-shard group's record of relayed pairs until their event's notice: the event
#: (``sender`` shard, ``sender_eseq``: unique among events awaiting a notice, as a shard's
#: eseq restarts only when it holds no event), the ``eseq`` its match got here, and whether
#: an operation counted it (``absorbed``: the event is used, as one purgatory would say)
#: ``spurious``: the pair's stub was not one of an operation held here (a refused duplicate's:
#: its event's reason is the sender's, ``relay.decide``)
RELAYED = {"sender": "int64", "sender_eseq": "int64", "eseq": "int64", "absorbed": "bool", "spurious": "bool"}
#: per key (by 64-bit hash): offset progress (running max of its finalised untargeted values)
#: and the last such event's time; ``resolved_until``: in old states only, never set now
KEYS = {"khash": "uint64", "progress": "float64", "last_event_ts": "int64", "resolved_until": "int64"}
#: the windows of completed operations, one row per (operation, watched key), until the
#: watermark passes their end: an event nothing counted inside one is ``after_resolution``
#: (``windows``)
WINDOWS = {"khash": "uint64", "ohash": "uint64", "start": "int64", "end": "int64"}
#: op_ids resolved within purgatory.dedup.retention.ms, as 64-bit hashes (compact: no strings)
RESOLVED = {"hash": "uint64", "expire_at": "int64"}
#: operations parked at their home shard until their op_id's registry shard says whether they
#: are the one copy (``registry``): the validated operation's columns
PARKED = {k: v for k, v in OPS.items() if k not in ("handle", "n_members")}
#: a home shard's claim of an op_id, handed to the op_id's registry shard (``registry``)
CLAIMS = {"op_id": "object", "ts": "int64", "deadline": "int64", "home": "int64"}
#: the registry's answer to a claiming home: is its copy the one?
VERDICTS = {"op_id": "object", "home": "int64", "ok": "bool"}
#: the tables that grow with pending operations
BIG_TABLES = {"ops": OPS, "watch": WATCH, "resolved": RESOLVED}
#: the tables that stay small
SMALL_TABLES = {
    "matches": MATCHES,
    "events": EVENTS,
    "keys": KEYS,
    "relayed": RELAYED,
    "windows": WINDOWS,
    "parked": PARKED,
}


@dataclass
class ShardTables:
    """A shard's whole engine state as plain tables and numbers.

    ``wheel`` None (on ``load_tables``) means: rebuild the timing wheel at ``wheel_now``
    from the deadlines of the pending operations not already ``due``.  The frames are the
    engine's own: read them, replace them, never modify them in place.
    """

    ops: pd.DataFrame
    watch: pd.DataFrame
    resolved: pd.DataFrame
    matches: pd.DataFrame
    events: pd.DataFrame
    keys: pd.DataFrame
    relayed: pd.DataFrame
    windows: pd.DataFrame
    parked: pd.DataFrame
    due: np.ndarray  # handles added with a deadline already passed, not on the wheel
    watermark: int
    next_handle: int
    next_eseq: int
    retired_wm: int  # the watermark of the last retirement of old keys and dedup rows
    wheel: TimingWheel | None
    wheel_now: int

    @classmethod
    def empty(cls) -> ShardTables:
        frames = {name: empty(dtypes) for name, dtypes in {**BIG_TABLES, **SMALL_TABLES}.items()}
        return cls(
            **frames,
            due=np.empty(0, np.int64),
            watermark=I64_MIN,
            next_handle=0,
            next_eseq=0,
            retired_wm=I64_MIN,
            wheel=None,
            wheel_now=0,
        )


def ops_rows(ops: Rows, first_handle: int) -> Rows:
    """Validated operations as rows of ``ops`` (with ``ohash``), handles from ``first_handle``
    on; ``n_members`` counted only where the host did not give it."""
    n = len(ops)
    n_members = ops.get("n_members")
    columns = {
        "handle": np.arange(first_handle, first_handle + n, dtype=np.int64),
        "op_id": ops["op_id"],
        "keys": ops["keys"],
        "ts": ops["ts"].astype(np.int64, copy=False),
        "deadline": ops["deadline"].astype(np.int64, copy=False),
        "cond": ops["cond"].astype(np.int8, copy=False),
        "target": ops["target"].astype(float, copy=False),
        "members": ops["members"],
        "payload": ops["payload"],
        "n_members": list_lengths(ops["members"])
        if n_members is None
        else n_members.astype(np.int64, copy=False),
        "stub": ops["stub"].astype(bool, copy=False),
        "warn_at": ops["warn_at"].astype(float, copy=False) if "warn_at" in ops else np.full(n, np.nan),
        "ohash": ops["ohash"],
    }
    if "one_key" in ops:
        columns["one_key"] = ops["one_key"]
    return Rows(columns, n)


@dataclass(frozen=True)
class Changes:
    """What the big tables gained and lost between two ``take_changes`` calls.

    * rows of ``ops`` and ``watch`` with ``handle >= added_from`` were added;
    * ``removed``: handles below ``added_from`` whose rows left those tables (an operation
      added and resolved in between is simply absent);
    * ``resolved``: the rows added to the dedup table (retirement may drop them later).
    """

    added_from: int
    removed: np.ndarray
    resolved: pd.DataFrame


class ChangeLog:
    """The engine's record of ``Changes``, reset by ``take``; until the first ``take`` every
    row counts as added, so a log nobody reads costs nothing.
    """

    def __init__(self) -> None:
        self.restart()

    def removed(self, handles: np.ndarray) -> None:
        old = handles[handles < self._added_from]
        if old.size:
            self._removed.append(old.astype(np.int64))

    def resolved(self, rows: Rows) -> None:
        if self._resolved is not None:
            self._resolved.append(rows)

    def take(self, next_handle: int, resolved_table: Callable[[], pd.DataFrame]) -> Changes:
        """The changes since the last take; the log starts afresh at ``next_handle``.
        ``resolved_table`` gives the whole dedup table (asked only when all of it is new)."""
        removed = distinct(np.concatenate([np.empty(0, np.int64), *self._removed]))
        if self._resolved is None:
            resolved = resolved_table()
        else:
            resolved = Rows.concat(self._resolved, RESOLVED).to_frame(RESOLVED)
        changes = Changes(self._added_from, removed, resolved)
        self._added_from, self._removed, self._resolved = int(next_handle), [], []
        return changes

    def restart(self) -> None:
        """Everything counts as added again (the tables were replaced)."""
        self._added_from = 0
        self._removed: list[np.ndarray] = []
        self._resolved: list[Rows] | None = None  # None: the whole table is new
