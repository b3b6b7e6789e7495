"""Resharding: the shards of a stopped purgatory as ``S`` primaries become ``N``, losing nothing.

``reshard`` gives the ``N + 1`` shards a run routed by the new ``shard_of`` would hold:

* **buffered events** go to their key's new shard in their old order, renumbered there;
* **pending operations** whose keys land in one new shard move there with their watchers and
  matches; one whose keys now span shards moves to the cross-shard group and leaves a stub
  in each new primary of its keys; one already warned asks for no warning any more;
* **stubs** follow their keys; the cross-shard group's records of relayed pairs are renamed
  to the events' new (shard, eseq);
* **key progress, completed windows and remembered op_ids** are kept by hash only, so every
  new shard gets all of them, plus the op_id of every pending operation.

Relays and verdicts still in the mailbox are the caller's to check.

Invariant: run after ``reshard``, the shards give the outcomes, unmatched events and rejected
rows the old shards would have given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from ..config import PurgatoryConfig
from ..engine.arrays import hash_strings
from ..engine.conditions import FLOOR_ESEQ, OFFSET
from ..engine.frames import empty
from ..engine.purgatory import Purgatory
from ..engine.tables import (
    EVENTS,
    I64_MIN,
    KEYS,
    MATCHES,
    OPS,
    RELAYED,
    RESOLVED,
    WATCH,
    WINDOWS,
    ShardTables,
)

#: an operation's and a watcher's columns but the handle (renumbered: ``old_handle`` names it)
_OPS_OLD = [c for c in OPS if c != "handle"]
_WATCH_OLD = [c for c in WATCH if c != "handle"]
#: new shard numbers of an array of keys (object array of str)
ShardOf = Callable[[np.ndarray], np.ndarray]


class ReshardError(ValueError):
    """A state ``reshard`` cannot move safely; the message is one line saying what to do."""


def reshard(
    shards: dict[int, Purgatory], new_shards: int, shard_of: ShardOf, config: PurgatoryConfig | None = None
) -> dict[int, Purgatory]:
    """The ``new_shards`` primaries and the cross-shard group that hold what ``shards`` held.

    Args:
        shards: every old shard by number, ``0 .. S - 1`` the primaries and ``S`` the
            cross-shard group (a shard with nothing is ``Purgatory()``).
        new_shards: ``N``, the new number of primary shards.
        shard_of: the new shard (``0 .. N - 1``) of each key of an object array.
        config: the new shards' configuration (the old cross-shard group's by default).

    Raises:
        ReshardError: operations parked for their registry's verdict, or events in the
            cross-shard group (the ``replicas`` hand-off).
    """
    old = PurgatoryConfig.shards_in(len(shards))  # the cross-shard group's number
    if sorted(shards) != list(range(old + 1)) or new_shards < 1:
        raise ReshardError(f"reshard needs shards 0..S (got {sorted(shards)}) and N >= 1 (got {new_shards})")
    config = config or shards[old].config
    tables = {s: p.tables() for s, p in shards.items()}
    for s, t in tables.items():
        if len(t.parked):
            raise ReshardError(
                f"shard {s} holds {len(t.parked)} operation(s) parked for their registry's verdict: "
                "run the query once more (trigger available-now) and rescale then"
            )
    if len(tables[old].events):
        raise ReshardError(
            "the cross-shard group holds events (the replicas hand-off): only a checkpoint with "
            "the mailbox hand-off (purgatory.state.path) can be rescaled"
        )
    primaries = [tables[s] for s in range(old)]
    cross = tables[old]
    events = _events(primaries, shard_of)
    ops, watch, matches = _pending(primaries, shard_of)
    new = {s: _Builder() for s in range(new_shards)}
    _place_events(events, new)
    cross_build = _CrossBuilder(cross)
    _place_operations(ops, watch, matches, events, new, cross_build)
    shared = _shared(tables, ops, config.dedup_retention_ms)
    watermark = max([t.watermark for t in primaries], default=I64_MIN)
    out: dict[int, Purgatory] = {}
    for s, b in new.items():
        p = Purgatory(config)
        p.load_tables(b.tables(shared, watermark, primaries))
        p.shard = s
        out[s] = p
    if len(events):  # each event's number in its new shard, for the records of relayed pairs
        seqs = pd.concat([b.seqs.assign(new=s) for s, b in new.items()], ignore_index=True)
        events = events.drop(columns=["new_eseq"]).merge(
            seqs.astype({"old": "int64", "eseq": "int64", "new": "int64"}), on=["new", "old", "eseq"]
        )
    p = Purgatory(config)
    p.load_tables(cross_build.tables(shared, events))
    p.shard = new_shards
    p.relays_through = shards[old].relays_through
    out[new_shards] = p
    return out


# -- gathering ---------------------------------------------------------------------------------------


def _events(primaries: list[ShardTables], shard_of: ShardOf) -> pd.DataFrame:
    """Every buffered event with its old shard (``old``) and new shard (``new``)."""
    frames = [t.events.assign(old=s) for s, t in enumerate(primaries) if len(t.events)]
    if not frames:
        return empty({**EVENTS, "old": "int64", "new": "int64", "new_eseq": "int64"})
    ev = pd.concat(frames, ignore_index=True)
    ev["new"] = np.asarray(shard_of(ev["key"].to_numpy(object)), np.int64)
    return ev


def _pending(
    primaries: list[ShardTables], shard_of: ShardOf
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The primaries' pending operations, watchers and matches with their ``old`` shard."""

    def gather(name: str, dtypes: dict) -> pd.DataFrame:
        frames = [getattr(t, name).assign(old=s) for s, t in enumerate(primaries) if len(getattr(t, name))]
        return pd.concat(frames, ignore_index=True) if frames else empty({**dtypes, "old": "int64"})

    ops, watch, matches = gather("ops", OPS), gather("watch", WATCH), gather("matches", MATCHES)
    if len(ops):  # warned where its clock passed warn_at (``delayed._warned``): a slower clock must not again
        now = np.array([t.wheel_now for t in primaries], np.int64)[ops["old"].to_numpy(np.int64)]
        ops.loc[ops["warn_at"].to_numpy(float) <= now, "warn_at"] = np.nan
    watch["new"] = np.asarray(shard_of(watch["key"].to_numpy(object)), np.int64) if len(watch) else []
    return ops, watch, matches


# -- the new primaries -------------------------------------------------------------------------------


class _Builder:
    """One new primary's rows, gathered from the old shards (``old`` columns) before their
    handles and event sequence numbers are renumbered."""

    def __init__(self) -> None:
        self.events: list[pd.DataFrame] = []
        self.ops: list[pd.DataFrame] = []  # with ``old``, ``old_handle``, ``handle`` (new)
        self.watch: list[pd.DataFrame] = []  # ``handle``: new
        self.matches: list[pd.DataFrame] = []  # ``handle``: new; ``old`` and ``eseq``: old
        self.next_handle = 0
        self.seqs = pd.DataFrame({"old": [], "eseq": [], "new_eseq": []})

    def add_op(self, rows: pd.DataFrame, watch: pd.DataFrame, matches: pd.DataFrame) -> None:
        """``rows``: operations with ``old`` and ``old_handle``; ``watch`` and ``matches``
        name them by ``old_handle`` (and ``old``)."""
        handles = np.arange(self.next_handle, self.next_handle + len(rows), dtype=np.int64)
        self.next_handle += len(rows)
        rows = rows.assign(handle=handles)
        key = rows[["old", "old_handle", "handle"]]
        self.ops.append(rows)
        self.watch.append(watch.merge(key, on=["old", "old_handle"]))
        self.matches.append(matches.merge(key, on=["old", "old_handle"]))

    def tables(self, shared: dict, watermark: int, primaries: list[ShardTables]) -> ShardTables:
        """The new primary's tables; ``seqs`` keeps its renumbering of events."""
        t = ShardTables.empty()
        events = _stack(self.events, {**EVENTS, "old": "int64"})
        matches = _stack(self.matches, {**MATCHES, "old": "int64"})
        # one numbering for the events held and the events the matches name, in old order
        named = matches.loc[matches["eseq"].to_numpy(np.int64) >= 0, ["old", "eseq"]]
        seqs = pd.concat([events[["old", "eseq"]], named]).drop_duplicates().sort_values(["old", "eseq"])
        seqs = seqs.assign(new_eseq=np.arange(len(seqs), dtype=np.int64))
        renumbered = _renumbered(events, seqs)
        self.seqs = seqs
        t.events = renumbered[list(EVENTS)].astype(EVENTS) if len(renumbered) else empty(EVENTS)
        m = _renumbered(matches, seqs)
        t.matches = m[list(MATCHES)].astype(MATCHES)
        ops = _stack(self.ops, {**OPS, "old": "int64", "old_handle": "int64"})
        t.ops = ops[list(OPS)].astype(OPS).reset_index(drop=True)
        t.watch = _stack(self.watch, WATCH)[list(WATCH)].astype(WATCH)
        t.next_handle, t.next_eseq = self.next_handle, len(seqs)
        t.keys, t.windows, t.resolved = shared["keys"], shared["windows"], shared["resolved"]
        t.watermark = watermark
        t.retired_wm = min([p.retired_wm for p in primaries], default=I64_MIN)
        t.wheel, t.wheel_now = None, _wheel_now(primaries)
        return t


def _renumbered(frame: pd.DataFrame, seqs: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each ``(old, eseq)`` replaced by its new number (floors keep theirs)."""
    if len(frame) == 0:
        return frame
    merged = frame.merge(seqs, on=["old", "eseq"], how="left")
    eseq = merged["eseq"].to_numpy(np.int64)
    renamed = merged["new_eseq"].to_numpy()
    merged["eseq"] = np.where(eseq >= 0, np.nan_to_num(renamed, nan=-1).astype(np.int64), eseq)
    return merged


def _place_events(events: pd.DataFrame, new: dict[int, _Builder]) -> None:
    """Each buffered event to its key's new shard."""
    if len(events) == 0:
        return
    events.sort_values(["new", "old", "eseq"], inplace=True, kind="stable")
    events.reset_index(drop=True, inplace=True)
    events["new_eseq"] = -1
    for s, b in new.items():
        mine = events.loc[events["new"].to_numpy() == s]
        b.events.append(mine[[*EVENTS, "old"]])


def _place_operations(
    ops: pd.DataFrame,
    watch: pd.DataFrame,
    matches: pd.DataFrame,
    events: pd.DataFrame,
    new: dict[int, _Builder],
    cross: _CrossBuilder,
) -> None:
    """Operations to their new home, stubs to their keys' shards, the rest cross-shard."""
    if len(ops) == 0:
        return
    ops = ops.rename(columns={"handle": "old_handle"})
    watch = watch.rename(columns={"handle": "old_handle"})
    matches = matches.rename(columns={"handle": "old_handle"})
    # the new shards of each operation's keys
    span = watch.groupby(["old", "old_handle"])["new"].agg(["min", "max"]).reset_index()
    ops = ops.merge(span, on=["old", "old_handle"], how="left")
    stub = ops["stub"].to_numpy(bool)
    local = ~stub & (ops["min"].to_numpy() == ops["max"].to_numpy())
    for s, b in new.items():
        mine = ops.loc[local & (ops["min"].to_numpy() == s)]
        if len(mine):
            b.add_op(mine.drop(columns=["min", "max"]), watch, matches)
    _place_stubs(ops.loc[stub], watch, matches, new)
    spanning = ops.loc[~stub & ~local]
    if len(spanning):
        cross.convert(spanning.drop(columns=["min", "max"]), watch, matches, events, new)


def _place_stubs(
    stubs: pd.DataFrame, watch: pd.DataFrame, matches: pd.DataFrame, new: dict[int, _Builder]
) -> None:
    """Stubs follow their keys: the fragments of one operation's stubs landing in one new
    shard become one stub there (its watchers and matches)."""
    if len(stubs) == 0:
        return
    w = watch.merge(stubs[["old", "old_handle", "op_id", "ts", "deadline"]], on=["old", "old_handle"])
    # one stub per (operation, new shard): named by its first fragment
    first = w.sort_values(["old", "old_handle"]).drop_duplicates(["op_id", "ts", "deadline", "new"])
    first = first[["op_id", "ts", "deadline", "new", "old", "old_handle"]].rename(
        columns={"old": "stub_old", "old_handle": "stub_handle"}
    )
    w = w.merge(first, on=["op_id", "ts", "deadline", "new"])
    # a stub match goes where its key's watcher went
    m = matches.merge(
        w[["old", "old_handle", "hash", "new", "stub_old", "stub_handle"]].rename(columns={"hash": "khash"}),
        on=["old", "old_handle", "khash"],
    )
    for s, b in new.items():
        ws = w.loc[w["new"].to_numpy() == s]
        if len(ws) == 0:
            continue
        heads = first.loc[first["new"].to_numpy() == s]
        rows = stubs.merge(
            heads[["stub_old", "stub_handle"]],
            left_on=["old", "old_handle"],
            right_on=["stub_old", "stub_handle"],
        )
        keys = ws.groupby(["stub_old", "stub_handle"], sort=False)["key"].agg(list).rename("new_keys")
        rows = rows.merge(keys, left_on=["stub_old", "stub_handle"], right_index=True)
        rows = rows.assign(keys=rows["new_keys"]).drop(columns=["new_keys", "min", "max"], errors="ignore")
        rows = rows[[*_OPS_OLD, "old", "old_handle"]]
        # the fragments' watchers and matches, named by the stub that holds them now
        ws = ws.drop(columns=["old", "old_handle"]).rename(
            columns={"stub_old": "old", "stub_handle": "old_handle"}
        )
        ms = m.loc[m["new"].to_numpy() == s].rename(columns={"old": "event_old"})
        ms = ms.drop(columns=["old_handle"]).rename(columns={"stub_old": "old", "stub_handle": "old_handle"})
        b.add_op(rows, ws[[*_WATCH_OLD, "old", "old_handle"]], ms.drop(columns=["new"]))
        # the match's event sequence number is its event's old shard's
        b.matches[-1] = b.matches[-1].drop(columns=["old"]).rename(columns={"event_old": "old"})


class _CrossBuilder:
    """The cross-shard group: its own state, plus the operations converted to cross-shard."""

    def __init__(self, t: ShardTables) -> None:
        self.t = t
        self.ops: list[pd.DataFrame] = []
        self.watch: list[pd.DataFrame] = []
        self.matches: list[pd.DataFrame] = []
        self.relayed: list[pd.DataFrame] = []
        self.next_handle, self.next_eseq = t.next_handle, t.next_eseq

    def convert(
        self,
        ops: pd.DataFrame,
        watch: pd.DataFrame,
        matches: pd.DataFrame,
        events: pd.DataFrame,
        new: dict[int, _Builder],
    ) -> None:
        """Single-shard operations whose keys now span shards, as cross-shard operations: here
        with their matches (floors for an ``offset`` one's watch-time progress and earlier
        events), and a stub in each new primary of their keys with the matches of the events
        still buffered there, whose pairs await their notices here."""
        handles = np.arange(self.next_handle, self.next_handle + len(ops), dtype=np.int64)
        self.next_handle += len(ops)
        ops = ops.assign(handle=handles)
        key = ops[["old", "old_handle", "handle", "ts", "cond"]].rename(columns={"ts": "op_ts"})
        w = watch.merge(key, on=["old", "old_handle"])
        self.ops.append(ops[list(OPS)])
        self.watch.append(w.assign(progress_at_watch=np.nan)[list(WATCH)])
        offset = w["cond"].to_numpy() == OFFSET
        floors = w.loc[offset & ~np.isnan(w["progress_at_watch"].to_numpy(float))]
        floor_rows = pd.DataFrame(
            {
                "handle": floors["handle"].to_numpy(np.int64),
                "khash": floors["hash"].to_numpy(np.uint64),
                "ts": I64_MIN,
                "eseq": FLOOR_ESEQ,
                "value": floors["progress_at_watch"].to_numpy(float),
                "source": None,
                "is_member": False,
            }
        )
        m = matches.merge(key, on=["old", "old_handle"])
        is_floor = (m["cond"].to_numpy() == OFFSET) & (
            m["ts"].to_numpy(np.int64) < m["op_ts"].to_numpy(np.int64)
        )
        is_floor |= m["eseq"].to_numpy(np.int64) < 0
        early = m.loc[is_floor]
        early_rows = early.assign(ts=I64_MIN, eseq=FLOOR_ESEQ, source=None, is_member=False)[list(MATCHES)]
        pairs = m.loc[~is_floor].sort_values(["old", "eseq"], kind="stable")
        cross_eseq = np.arange(self.next_eseq, self.next_eseq + len(pairs), dtype=np.int64)
        self.next_eseq += len(pairs)
        pairs = pairs.assign(cross_eseq=cross_eseq)
        self.matches.append(pd.concat([floor_rows, early_rows, pairs.assign(eseq=cross_eseq)[list(MATCHES)]]))
        # the pairs whose events are still buffered: a stub match in the event's new shard,
        # and a notice awaited here
        held = events[["old", "eseq", "new", "key"]]
        buffered = m.merge(held, on=["old", "eseq"])  # floors too: the stub holds them as matches
        buffered = buffered.merge(
            pairs[["old", "eseq", "handle", "cross_eseq"]], on=["old", "eseq", "handle"], how="left"
        )
        self.relayed.append(
            pd.DataFrame(
                {
                    "old": buffered["old"].to_numpy(np.int64),
                    "old_eseq": buffered["eseq"].to_numpy(np.int64),
                    "eseq": buffered["cross_eseq"].to_numpy(),
                }
            ).dropna()
        )
        for s, b in new.items():
            ws = w.loc[w["new"].to_numpy() == s]
            if len(ws) == 0:
                continue
            keys = ws.groupby(["old", "old_handle"], sort=False)["key"].agg(list).rename("new_keys")
            stubs = ops.merge(keys, left_on=["old", "old_handle"], right_index=True)
            stubs = stubs.assign(keys=stubs["new_keys"], stub=True)[[*_OPS_OLD, "old", "old_handle"]]
            bm = buffered.loc[buffered["new"].to_numpy() == s]
            b.add_op(
                stubs,
                ws[[*_WATCH_OLD, "old", "old_handle"]],
                bm[[*MATCHES, "old", "old_handle"]].drop(columns=["handle"]),
            )

    def tables(self, shared: dict, events: pd.DataFrame) -> ShardTables:
        t = self.t
        relayed = t.relayed
        if len(relayed):  # the events awaiting notices now live under new (shard, eseq)
            relayed = _renamed_senders(relayed, events)
        extra = _stack(self.relayed, {"old": "int64", "old_eseq": "int64", "eseq": "int64"})
        if len(extra):
            moved = extra.merge(
                events[["old", "eseq", "new", "new_eseq"]].rename(columns={"eseq": "old_eseq"}),
                on=["old", "old_eseq"],
            )
            relayed = pd.concat(
                [
                    relayed,
                    pd.DataFrame(
                        {
                            "sender": moved["new"].to_numpy(np.int64),
                            "sender_eseq": moved["new_eseq"].to_numpy(np.int64),
                            "eseq": moved["eseq"].to_numpy(np.int64),
                            "absorbed": False,
                            "spurious": False,
                        }
                    ),
                ],
                ignore_index=True,
            )
        return replace(  # its events, keys, windows, parked operations and clocks stay
            t,
            ops=pd.concat([t.ops, *self.ops], ignore_index=True)[list(OPS)].astype(OPS),
            watch=pd.concat([t.watch, *self.watch], ignore_index=True)[list(WATCH)].astype(WATCH),
            resolved=shared["resolved"],
            matches=pd.concat([t.matches, *self.matches], ignore_index=True)[list(MATCHES)].astype(MATCHES),
            relayed=relayed[list(RELAYED)].astype(RELAYED),
            due=np.empty(0, np.int64),
            next_handle=self.next_handle,
            next_eseq=self.next_eseq,
            wheel=None,
        )


def _renamed_senders(relayed: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """The cross-shard group's records of pairs awaiting notices, under their events' new
    (shard, eseq)."""
    named = relayed.merge(
        events[["old", "eseq", "new", "new_eseq"]],
        left_on=["sender", "sender_eseq"],
        right_on=["old", "eseq"],
        how="left",
        suffixes=("", "_event"),
    )
    lost = named["new"].isna()
    if lost.any():
        raise ReshardError(
            f"the cross-shard group awaits notices of {int(lost.sum())} event(s) no primary holds: "
            "the state is not one this version wrote; start a new checkpoint"
        )
    return named.assign(sender=named["new"].astype(np.int64), sender_eseq=named["new_eseq"].astype(np.int64))


# -- what every shard gets ----------------------------------------------------------------------------


def _shared(tables: dict[int, ShardTables], ops: pd.DataFrame, retention_ms: int) -> dict:
    """The tables kept by hash only, which every new shard gets whole (module docstring)."""
    primaries = [t for s, t in tables.items() if s < len(tables) - 1]
    keys = _stack([t.keys for t in primaries], KEYS)
    if len(keys):  # copies of a key from an earlier reshard: the owner's is the most advanced
        keys = keys.groupby("khash", as_index=False).agg(
            {"progress": "max", "last_event_ts": "max", "resolved_until": "max"}
        )
    windows = _stack([t.windows for t in primaries], WINDOWS).drop_duplicates()
    resolved = _stack([t.resolved for t in tables.values()], RESOLVED)
    if len(ops):  # the pending operations, remembered as their registry remembers a claim
        real = ops.loc[~ops["stub"].to_numpy(bool)]
        resolved = pd.concat([resolved, _pending_memory(real, tables, retention_ms)], ignore_index=True)
    if len(resolved):
        resolved = resolved.groupby("hash", as_index=False)["expire_at"].max()
    return {
        "keys": keys.astype(KEYS).reset_index(drop=True),
        "windows": windows.astype(WINDOWS).reset_index(drop=True),
        "resolved": resolved.astype(RESOLVED).reset_index(drop=True),
    }


def _pending_memory(ops: pd.DataFrame, tables: dict[int, ShardTables], retention_ms: int) -> pd.DataFrame:
    """Dedup rows for pending operations, as the registry remembers a winning claim
    (``dedup.resolved_rows``)."""
    watermark = max(t.watermark for t in tables.values())
    until = np.maximum(ops["deadline"].to_numpy(np.int64), watermark) + int(retention_ms)
    return pd.DataFrame({"hash": hash_strings(ops["op_id"].to_numpy(object)), "expire_at": until})


def _wheel_now(primaries: list[ShardTables]) -> int:
    """Where a new primary's wheel starts: the earliest of the old primaries holding
    operations (its operations' deadlines are all on or after it, or due)."""
    holding = [t.wheel_now for t in primaries if len(t.ops)]
    return min(holding) if holding else max([t.wheel_now for t in primaries], default=0)


def _stack(frames: list[pd.DataFrame], dtypes: dict) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty(dtypes)
    return pd.concat(frames, ignore_index=True)
