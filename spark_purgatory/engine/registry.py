"""The op_id registry: one outcome per op_id across shards, with no funnel.

Duplicate op_ids are caught at an operation's *home* shard, so a repeated op_id whose keys
hash elsewhere would get a second outcome.  Each op_id also has a *registry* shard, by its
hash, which decides which copy is the one:

* an operation whose registry is its home is decided in the call it arrives in;
* any other is *parked* at its home for one call, and its registry gets a *claim*;
* the registry refuses an op_id it remembers; otherwise the earliest ``ts`` wins, then the
  lowest home shard, then input order; each claiming home gets a *verdict* in its next call.

A parked operation loses nothing: its ``ts`` is at least the watermark that parked it, so
every event it can match is still buffered; only its outcome may come one micro-batch later.

Invariant: of the valid copies of an op_id arriving while it is remembered nowhere, exactly one
is admitted, in any shard (a hash collision may refuse a new op_id, never admit a second copy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..contract import DUPLICATE_OP_ID, SOURCE_OPERATIONS
from . import dedup
from .arrays import hash_strings
from .batch import rejected_rows
from .rows import Rows
from .tables import CLAIMS, PARKED, RESOLVED, VERDICTS

if TYPE_CHECKING:
    from ..config import PurgatoryConfig
    from .snapshot import LiveTables

#: an operation's ``registry`` when the host gives none: decided where it is
NO_REGISTRY = -1


def away(ops: Rows, shard: int | None) -> np.ndarray:
    """Which operations (not stubs) have a registry other than this shard: they park."""
    if shard is None or "registry" not in ops or len(ops) == 0:
        return np.zeros(len(ops), dtype=bool)
    registry = ops["registry"].astype(np.int64, copy=False)
    return (registry != NO_REGISTRY) & (registry != shard) & ~ops["stub"].astype(bool, copy=False)


def decide(
    own: Rows,
    claims: Rows,
    shard: int,
    remembered: np.ndarray,
    claim_remembered: np.ndarray,
    *,
    watermark: int,
    retention_ms: int,
) -> tuple[np.ndarray, Rows, Rows]:
    """The registry's decisions on its own admitted operations and other homes' ``claims``:
    per ``own`` row whether it is admitted, the ``VERDICTS`` for the claiming homes, and the
    ``RESOLVED`` rows that remember the winning claims."""
    n_own, n_claims = len(own), len(claims)
    if n_claims == 0:
        return ~remembered, Rows.empty(VERDICTS), Rows.empty(RESOLVED)
    op_ids = np.concatenate([own["op_id"].astype(object), claims["op_id"].astype(object)])
    codes, uniques = pd.factorize(op_ids, use_na_sentinel=False)
    ts = np.concatenate([own["ts"], claims["ts"]]).astype(np.int64)
    home = np.concatenate([np.full(n_own, shard, np.int64), claims["home"].astype(np.int64)])
    # the op_ids any copy of which is remembered: every copy refused
    refused = np.zeros(len(uniques), dtype=bool)
    refused[codes[np.concatenate([remembered, claim_remembered])]] = True
    open_rows = np.flatnonzero(~refused[codes])
    # the earliest ts wins, then the lowest home, then input order (a stable sort's)
    ranked = open_rows[np.lexsort((home[open_rows], ts[open_rows]))]
    first = ranked[np.sort(np.unique(codes[ranked], return_index=True)[1])]  # each op_id's winner
    winner = np.full(len(uniques), -1, dtype=np.int64)  # -1: refused (no shard's number)
    winner[codes[first]] = home[first]
    own_ok = winner[codes[:n_own]] == shard
    claim_codes, claim_homes = codes[n_own:], home[n_own:]
    pair = claim_codes * (int(claim_homes.max()) + 1) + claim_homes  # (op_id, home) as one number
    pairs = np.sort(np.unique(pair, return_index=True)[1])  # each pair's first claim, in input order
    verdicts = Rows(
        {
            "op_id": op_ids[n_own:][pairs],
            "home": claim_homes[pairs],
            "ok": winner[claim_codes[pairs]] == claim_homes[pairs],
        },
        len(pairs),
    )
    won = first[home[first] != shard]  # claims that won, in the order they rank
    deadline = claims["deadline"].astype(np.int64)[won - n_own]
    ids = op_ids[won]
    registered = dedup.resolved_rows(ids, deadline, watermark, retention_ms, hash_strings(ids))
    return own_ok, verdicts, registered


def release(parked: Rows, verdicts: Rows | None, shard: int) -> tuple[Rows, Rows, Rows]:
    """The parked operations, given the verdicts addressed here: (admitted, refused, still
    parked); ``verdicts`` None: all stay parked.  One the verdicts do not name is admitted:
    an operation without an outcome would be worse than a second copy."""
    if len(parked) == 0:
        return parked, parked, parked
    if verdicts is None:
        return parked.take(np.empty(0, np.int64)), parked.take(np.empty(0, np.int64)), parked
    mine = verdicts.where(verdicts["home"].astype(np.int64) == shard)
    refused_ids = pd.Index(mine["op_id"][~mine["ok"].astype(bool)].astype(object))
    no = (
        refused_ids.get_indexer(parked["op_id"].astype(object)) >= 0
        if len(refused_ids)
        else np.zeros(len(parked), dtype=bool)
    )
    return parked.where(~no), parked.where(no), parked.take(np.empty(0, np.int64))


def claims_of(claims: pd.DataFrame | None) -> Rows:
    """The host's claims as ``CLAIMS`` rows (empty when none)."""
    if claims is None or len(claims) == 0:
        return Rows.empty(CLAIMS)
    return Rows.of(claims[list(CLAIMS)], CLAIMS)


_REGISTERED = [*PARKED, "ohash"]


def settle(
    t: LiveTables,
    shard: int | None,
    config: PurgatoryConfig,
    ops: Rows,
    claims: pd.DataFrame | None,
    verdicts: pd.DataFrame | None,
    wm: int,
) -> tuple[Rows, Rows, list[pd.DataFrame], Rows]:
    """One call's registry work: the operations to register now, the parked ones released (to
    register first), the rows rejected ``duplicate_op_id``, and the verdicts on the claims."""
    rejected: list[pd.DataFrame] = []
    answers = None if verdicts is None else Rows.of(verdicts, VERDICTS)
    released, refused, still = release(t.parked, answers, -1 if shard is None else shard)
    if len(refused):
        rejected.append(rejected_rows(SOURCE_OPERATIONS, refused, DUPLICATE_OP_ID))
    claimed = claims_of(claims)
    out = Rows.empty(VERDICTS)
    parking = away(ops, shard)
    if shard is not None and (len(claimed) or "registry" in ops):
        stub = ops["stub"].astype(bool, copy=False)
        mine = ~parking & ~stub
        if "registry" in ops:
            mine &= ops["registry"].astype(np.int64, copy=False) != NO_REGISTRY
        claimed = claimed.where(claimed["ts"] >= wm)  # a late copy: its home rejects it
        hashes = hash_strings(claimed["op_id"].astype(object))
        known = t.resolved.contains(hashes)
        known[t.pending.by_op_id(claimed["op_id"].astype(object), hashes)[0]] = True
        own_ok, out, registered = decide(
            ops.where(mine),
            claimed,
            shard,
            np.zeros(int(mine.sum()), dtype=bool),
            known,
            watermark=wm,
            retention_ms=config.dedup_retention_ms,
        )
        if len(registered):
            t.changes.resolved(registered)
            t.resolved.add(registered)
        lost = np.zeros(len(ops), dtype=bool)
        lost[np.flatnonzero(mine)[~own_ok]] = True
        if lost.any():
            rejected.append(rejected_rows(SOURCE_OPERATIONS, ops.where(lost), DUPLICATE_OP_ID))
        ops = ops.where(~lost)
        parking = parking[~lost]
    if parking.any():
        still = still.stack(ops.where(parking).select(PARKED).cast(PARKED))
        ops = ops.where(~parking)
    t.parked = still
    if len(released):
        released = released.assign(ohash=hash_strings(released["op_id"].astype(object)))
    return ops, released.select(_REGISTERED) if len(released) else released, rejected, out
