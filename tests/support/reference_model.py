"""The contract, written the slow and obvious way: the reference every split is checked against.

No wheel, no indexes, no shards, no vectorising: per micro-batch, per operation, scan every
event that has arrived.  ``run`` takes the input already cut into micro-batches, each with the
watermark it runs at (the watermark is the one thing a split legitimately changes: a row
behind it when it arrives is ``late``), and returns what the contract promises:

* ``outcomes``: op_id -> (status, resolved_at, matched_events, progress);
* ``unmatched``: a sorted list of (key, ts, op_id, source, value, reason);
* ``rejected``: a sorted list of (source, reason, op_id, key);
* ``pending``: the op_ids still pending after the last micro-batch;
* ``answered``: op_id -> (reported, missing), who answered each outcome (rule 5);
* ``warnings``: op_id -> (warned_at, progress, reported, missing), its one warning (rule 6).

The rules, as ``docs/contract.md`` states them:

1. A row is rejected, first for what validation says (the generator here makes only rows
   whose reason it knows), then ``late`` when its event time is behind the micro-batch's
   watermark, then ``duplicate_op_id`` when its op_id was admitted before (pending, resolved)
   or another copy of the same micro-batch is kept: of several, the earliest ``ts``, then
   the lowest home shard (``home``), then the first in input order.
2. An event e *matches* operation o when e.key is one of o's keys, e.op_id (if set) is
   o.op_id, and o.ts <= e.ts < o.deadline.  For ``offset`` an untargeted event before o.ts on
   the key also raises the key's progress (the running max of values), but is not one of
   o's matched events.
3. At the end of each micro-batch, an operation whose condition holds over the matching
   events *that have arrived so far* completes; ``resolved_at`` is the earliest event time
   at which those events make it true.  The matched events are the ones up to and including
   the crossing event in (ts, arrival) order (arrival: micro-batch by micro-batch, each one's
   events shard by shard, ``run``'s ``shard``); ``progress`` is the measure there (for
   ``offset``, the crossing is the reaching event of the key that reached the target last,
   or none when that key had reached it before o.ts).  Else, when
   the watermark has reached its deadline, it expires at its deadline with every matching
   event.  (So an operation is decided against every event of its micro-batch and of the
   buffer: the arrival order inside and across micro-batches does not matter, except for an
   event that arrives after its operation completed, with an earlier event time; it cannot
   change an outcome already written.  With each input in event-time order that happens only
   to an ``offset`` operation holding on arrival, whose ``progress`` is then that of the
   events arrived.)  A *cancel* event (``cancel: true``) matches as rule 2 says and never
   counts: an operation's first matching cancel in (ts, arrival) order withdraws it, status
   ``cancelled`` at the cancel's time, unless its condition holds over the matching events
   before that cancel (then it completes as above); its matched events and progress are
   those events' (so a cancel at or after the deadline withdraws nothing: the operation
   expires).  An operation parked for its op_id's registry (``engine.registry``) is
   decided from the next micro-batch on: the events arrived are then that micro-batch's too.
4. An admitted event no operation counted is reported once the watermark has passed it and
   no pending operation can still count it: ``after_resolution`` if it lies in the window of
   an operation that matched it and was resolved without it, else ``no_operation``; a cancel
   that withdrew nothing likewise ``cancel_after_resolution`` or ``cancel_no_operation``.
5. Who answered an outcome, from the events it counted (rule 3): for ``all`` and ``quorum``
   the members (distinct and sorted, as validation keeps them) that are the source of one of
   them, and the other members; for ``count`` the distinct sources of its counted events in
   (ts, arrival) order, at most ``input.max.members``, and no missing list; for the others
   neither.
6. An operation with ``warn_ms`` is warned, once, at ``warn_at = deadline - warn_ms`` unless
   it resolved strictly before ``warn_at``: in the micro-batch that resolves it at or after
   ``warn_at``, or in the first whose watermark reaches ``warn_at`` while it is pending.  Its
   progress and who answered are rule 3's measure and rule 5's lists over the matching events
   arrived by then with ``ts < warn_at`` (for ``offset``, the keys' progress before it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from spark_purgatory.contract import MAX_MEMBERS

__all__ = ["Batch", "Result", "run", "spark_watermarks"]

INF = float("inf")


@dataclass
class Batch:
    """One micro-batch: its operations and events (dicts in the input contract, times in ms;
    a row may carry ``_reason``, the validation reason it must be rejected for) and its
    watermark."""

    ops: list[dict]
    events: list[dict]
    watermark: int


@dataclass
class Result:
    outcomes: dict[str, tuple]
    unmatched: list[tuple]
    rejected: list[tuple]
    pending: set[str] = field(default_factory=set)
    answered: dict[str, tuple] = field(default_factory=dict)
    warnings: dict[str, tuple] = field(default_factory=dict)


@dataclass
class _Op:
    row: dict
    deadline: int
    status: str = "pending"
    resolved_at: int | None = None
    counted: list[int] = field(default_factory=list)  # indexes of the events it counted
    withdrawn_by: int | None = None  # index of the cancel that withdrew it
    progress: float = 0.0
    decided_from: int = 0  # the micro-batch from which it is decided (``parks``: the next one)
    warning: tuple | None = None  # rule 6, once given


def run(batches: list[Batch], home=lambda o: 0, parks=lambda o: False, shard=lambda e: 0) -> Result:
    """Every micro-batch in order; see the module docstring for the rules.  ``home``: the
    shard an operation lives in (rule 1's tie between copies of one micro-batch); ``parks``:
    whether an admitted operation waits for its registry's verdict (rule 3: it is decided
    from the next micro-batch on, as if it arrived there, but was never late); ``shard``: an
    event's shard, the arrival order of a micro-batch's events (rule 3's tie between events
    of equal time): a cross-shard operation takes them as its stubs relay them, shard by shard."""
    ops: dict[str, _Op] = {}
    events: list[dict] = []  # admitted events, in arrival order
    rejected: list[tuple] = []
    wm = -(2**62)
    for n, batch in enumerate(batches):
        wm = max(wm, batch.watermark)
        candidates = []
        for i, o in enumerate(batch.ops):
            key = o["keys"][0] if o.get("keys") else None
            if o.get("_reason"):
                rejected.append(("operations", o["_reason"], o.get("op_id"), key))
            elif o["ts"] < wm:
                rejected.append(("operations", "late", o["op_id"], key))
            else:
                candidates.append((o["ts"], home(o), i, o, key))
        for _, _, _, o, key in sorted(candidates, key=lambda c: c[:3]):
            if o["op_id"] in ops:
                rejected.append(("operations", "duplicate_op_id", o["op_id"], key))
            else:
                ops[o["op_id"]] = _Op(o, o["ts"] + o["timeout_ms"], decided_from=n + parks(o))
        admitted = []
        for e in batch.events:
            if e.get("_reason"):
                rejected.append(("events", e["_reason"], e.get("op_id"), e.get("key")))
            elif e["ts"] < wm:
                rejected.append(("events", "late", e.get("op_id"), e["key"]))
            else:
                admitted.append(e)
        events += sorted(admitted, key=shard)  # stable: input order within a shard
        for o in ops.values():
            if o.status == "pending" and o.decided_from <= n:
                _decide(o, events, wm)
            if o.decided_from <= n:
                _warn(o, events, wm)
    for o in ops.values():  # parked in the last micro-batch: decided in the host's next one
        if o.status == "pending" and o.decided_from == len(batches):
            _decide(o, events, wm)
            _warn(o, events, wm)
    return Result(
        {
            i: (o.status, o.resolved_at, len(o.counted), None if math.isnan(o.progress) else o.progress)
            for i, o in ops.items()
            if o.status != "pending"
        },
        sorted(_unmatched(ops, events, wm), key=repr),
        sorted(rejected, key=repr),
        {i for i, o in ops.items() if o.status == "pending"},
        {i: _answered(o, events) for i, o in ops.items() if o.status != "pending"},
        {i: o.warning for i, o in ops.items() if o.warning is not None},
    )


def matches(o: dict, deadline: int, e: dict) -> bool:
    """Rule 2: does event ``e`` match operation ``o`` (its window, its keys, its op_id)?"""
    return e["key"] in o["keys"] and e.get("op_id") in (None, o["op_id"]) and o["ts"] <= e["ts"] < deadline


def _decide(o: _Op, events: list[dict], wm: int) -> None:
    """Rule 3 for one pending operation, over the events arrived so far."""
    cancels = [
        (e["ts"], i) for i, e in enumerate(events) if e.get("cancel") and matches(o.row, o.deadline, e)
    ]
    cancel = min(cancels, default=(INF, INF))
    mine = sorted(
        (
            i
            for i, e in enumerate(events)
            if not e.get("cancel") and matches(o.row, o.deadline, e) and (e["ts"], i) < cancel
        ),
        key=lambda i: (events[i]["ts"], i),
    )
    cond = o.row.get("condition", "any")
    if cond == "offset":
        crossing = _offset_reached(o, events, cancel)
        if crossing is not None:
            o.status, o.resolved_at = "completed", crossing[0]
            o.counted = [i for i in mine if (events[i]["ts"], i) <= crossing]
            o.progress = _offset_progress(o, events, crossing)
            return
    else:
        measure = _Measure(o.row)
        if measure.holds():  # count / sum with nothing to reach
            o.status, o.resolved_at, o.progress = "completed", o.row["ts"], measure.value()
            return
        for n, i in enumerate(mine):
            measure.add(events[i])
            if measure.holds():
                o.status, o.resolved_at = "completed", events[i]["ts"]
                o.counted, o.progress = mine[: n + 1], measure.value()
                return
    if cancels:  # withdrawn at its first cancel, with the events before it
        o.status, o.resolved_at, o.counted, o.withdrawn_by = "cancelled", cancel[0], mine, cancel[1]
    elif wm >= o.deadline:
        o.status, o.resolved_at, o.counted = "expired", o.deadline, mine
    else:
        return
    if cond == "offset":
        o.progress = _offset_progress(o, events, cancel if cancels else (o.deadline, -1))
    else:
        measure = _Measure(o.row)
        for i in mine:
            measure.add(events[i])
        o.progress = measure.value()


def _warn(o: _Op, events: list[dict], wm: int) -> None:
    """Rule 6 for one operation, after its micro-batch's decision."""
    if o.row.get("warn_ms") is None or o.warning is not None:
        return
    warn_at = o.deadline - o.row["warn_ms"]
    if wm < warn_at if o.status == "pending" else o.resolved_at < warn_at:
        return
    before = [
        i
        for i, e in enumerate(events)
        if not e.get("cancel") and matches(o.row, o.deadline, e) and e["ts"] < warn_at
    ]
    if o.row.get("condition", "any") == "offset":
        progress = _offset_progress(o, events, (warn_at, -1))
    else:
        measure = _Measure(o.row)
        for i in sorted(before, key=lambda i: (events[i]["ts"], i)):
            measure.add(events[i])
        progress = measure.value()
    reported, missing = _answered(replace(o, counted=before), events)
    o.warning = (warn_at, None if math.isnan(progress) else progress, reported, missing)


class _Measure:
    """The cumulative measure of any / count / sum / all / quorum, one event at a time: the
    events, the distinct sources (``count``; the sourceless ones each count), the sum of
    values, the distinct members that reported (``all``, ``quorum``)."""

    def __init__(self, o: dict) -> None:
        self.o, self.cond = o, o.get("condition", "any")
        self.n, self.total, self.sources = 0, 0.0, set()

    def add(self, e: dict) -> None:
        source = e.get("source")
        if self.cond == "count":
            self.n += source is None or source not in self.sources
        elif self.cond == "any":
            self.n += 1
        elif self.cond == "sum":
            self.total += e.get("value") if e.get("value") is not None else 0.0
        if source is not None and (self.cond == "count" or source in self.o.get("members", [])):
            self.sources.add(source)

    def value(self) -> float:
        if self.cond == "sum":
            return self.total
        if self.cond in ("all", "quorum"):
            return float(len(self.sources))
        return float(self.n)

    def holds(self) -> bool:
        target = self.o.get("target")
        if self.cond == "any":
            return self.n >= 1
        if self.cond == "count":
            return self.n >= target
        if self.cond == "sum":
            return self.total >= target - abs(target) * 1e-12
        if self.cond == "all":
            return set(self.o["members"]) <= self.sources
        if self.cond == "quorum":  # k of the named members, each once; a non-member never counts
            return len(self.sources) >= target
        raise ValueError(self.cond)


def _answered(o: _Op, events: list[dict]) -> tuple:
    """Rule 5: (reported, missing) of a resolved operation, lists or None."""
    cond = o.row.get("condition", "any")
    sources = [events[i].get("source") for i in sorted(o.counted, key=lambda i: (events[i]["ts"], i))]
    if cond in ("all", "quorum"):
        members = sorted(set(o.row["members"]))
        return [m for m in members if m in sources], [m for m in members if m not in sources]
    if cond == "count":
        distinct = [s for n, s in enumerate(sources) if s is not None and s not in sources[:n]]
        return distinct[:MAX_MEMBERS], None
    return None, None


def _progress_events(o: _Op, events: list[dict], key: str, until: tuple) -> list[int]:
    """The events (indexes) that raise ``key``'s progress for offset operation ``o``, up to
    ``until`` (a (ts, arrival) bound): untargeted ones before its deadline (even before o.ts),
    and its own targeted ones."""
    return [
        i
        for i, e in enumerate(events)
        if e["key"] == key
        and (e["ts"], i) <= until
        and e["ts"] < o.deadline
        and e.get("value") is not None
        and not e.get("cancel")
        and (e.get("op_id") is None or (e["op_id"] == o.row["op_id"] and e["ts"] >= o.row["ts"]))
    ]


def _offset_reached(o: _Op, events: list[dict], until: tuple = (INF, INF)) -> tuple[int, int] | None:
    """The *crossing*: when the last key's running max reached the target, as (time, arrival
    index) of the event that reached it, (o.ts, -1) when that key had reached it before o.ts;
    None if a key has not (by ``until``, a (ts, arrival) bound)."""
    target = o.row["target"]
    reached = []
    for key in o.row["keys"]:
        hits = sorted(
            (events[i]["ts"], i)
            for i in _progress_events(o, events, key, until)
            if events[i]["value"] >= target
        )
        if not hits:
            return None
        reached.append(hits[0] if hits[0][0] >= o.row["ts"] else (o.row["ts"], -1))
    return max(reached)


def _offset_progress(o: _Op, events: list[dict], until: tuple) -> float:
    """The lowest key's running max up to ``until`` (NaN when a key has no progress)."""
    best = []
    for key in o.row["keys"]:
        values = [events[i]["value"] for i in _progress_events(o, events, key, until)]
        best.append(max(values) if values else math.nan)
    return math.nan if any(math.isnan(b) for b in best) else min(best)


def _unmatched(ops: dict[str, _Op], events: list[dict], wm: int) -> list[tuple]:
    """Rule 4: the events the watermark passed that nothing counted and nothing pending can."""
    counted = {i for o in ops.values() for i in [*o.counted, o.withdrawn_by]}
    out = []
    for i, e in enumerate(events):
        if i in counted or e["ts"] >= wm:
            continue
        windows = [o for o in ops.values() if matches(o.row, o.deadline, e)]
        if any(o.status == "pending" for o in windows):
            continue  # a pending operation counts it when it resolves
        reason = "after_resolution" if windows else "no_operation"
        reason = f"cancel_{reason}" if e.get("cancel") else reason
        out.append((e["key"], e["ts"], e.get("op_id"), e.get("source"), e.get("value"), reason))
    return out


def spark_watermarks(
    batches: list[tuple[list[dict], list[dict]]], delays_ms: tuple[int, int], policy: str = "min"
) -> list[int]:
    """The watermark Spark runs each micro-batch at: from the rows of the micro-batches before
    it, per input the largest event time minus that input's delay (operations', events'),
    combined over the inputs that have seen rows (``min`` or ``max``), never moving back; 0
    before any."""
    out, wm = [], 0
    latest: dict[int, int] = {}
    for ops, events in batches:
        out.append(wm)
        for i, rows in enumerate((ops, events)):
            times = [r["ts"] for r in rows if not r.get("_reason")]
            if times:
                latest[i] = max(latest.get(i, -(2**62)), max(times) - delays_ms[i])
        if latest:
            combine = min if policy == "min" else max
            wm = max(wm, combine(latest.values()))
    return out
