"""Small builders for engine tests: operations and events as readable dicts."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from spark_purgatory import BatchResult, Purgatory
from spark_purgatory.config import PurgatoryConfig


def op(
    op_id: str, key: str | list[str], ts: int, timeout_ms: int = 1000, condition: str = "any", **extra
) -> dict:
    row = {"op_id": op_id, "ts": ts, "timeout_ms": timeout_ms, "condition": condition}
    row["keys"] = [key] if isinstance(key, str) else key
    row.update(extra)
    return row


def ev(key: str, ts: int, **extra) -> dict:
    return {"key": key, "ts": ts, **extra}


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def purgatory(**settings) -> Purgatory:
    base = {"tick_ms": 10, "wheel_size": 8}
    base.update(settings)
    return Purgatory(PurgatoryConfig(**base))


def step(
    p: Purgatory, ops: list[dict] = (), events: list[dict] = (), wm: int = 0, batch_id: int = 0
) -> BatchResult:
    return p.process(frame(list(ops)), frame(list(events)), watermark_ms=wm, batch_id=batch_id)


def outcomes(result: BatchResult) -> dict[str, dict]:
    return {row["op_id"]: row for row in result.outcomes.to_dict(orient="records")}


def stacked(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Calls' frames one after another (``pd.concat``), the empty ones left out (all of them
    when none has rows): the columns keep the dtypes of the frames with rows.  A call's frame
    with no rows has all-object columns (``engine.batch.result``); stacked with the others,
    pandas 2 makes the integer columns object and warns (``FutureWarning``) that pandas 3
    makes every column object."""
    frames = list(frames)
    return pd.concat([f for f in frames if len(f)] or frames, ignore_index=True)


# -- batch-split invariance against a brute-force reference -------------------------------------


def reference(ops: list[dict], events: list[dict]) -> dict[str, tuple[str, int]]:
    """SPEC semantics written the slow, obvious way: op_id -> (status, resolved_at)."""
    result = {}
    for o in ops:
        deadline = o["ts"] + o["timeout_ms"]
        mine = [
            (e["ts"], i, e)
            for i, e in enumerate(events)
            if e["key"] in o["keys"]
            and e["ts"] < deadline
            and e.get("op_id") in (None, o["op_id"])
            and (e["ts"] >= o["ts"] or (o["condition"] == "offset" and e.get("op_id") is None))
        ]
        mine.sort(key=lambda t: (t[0], t[1]))
        at = None
        if o["condition"] == "offset":
            reach = []
            for k in o["keys"]:
                best, when = -np.inf, None
                for ts, _, e in mine:
                    if e["key"] == k:
                        best = max(best, e.get("value", 0.0))
                        if best >= o["target"]:
                            when = max(ts, o["ts"])
                            break
                reach.append(when)
            at = None if None in reach else max(reach)
        else:
            sources, total, count = set(), 0.0, 0
            for ts, _, e in mine:
                src = e.get("source")
                if o["condition"] == "count":
                    if src is None or src not in sources:
                        count += 1
                    if src is not None:
                        sources.add(src)
                    hit = count >= o["target"]
                elif o["condition"] == "all":
                    if src in o["members"]:
                        sources.add(src)
                    hit = sources == set(o["members"])
                elif o["condition"] == "sum":
                    total += e.get("value", 0.0)
                    hit = total >= o["target"]
                else:
                    hit = True
                if hit:
                    at = ts
                    break
        result[o["op_id"]] = ("completed", at) if at is not None else ("expired", deadline)
    return result


#: per trial (number, segment_rows): what to do to the shard after every batch (p, rng) -> p,
#: and a check of the shard after the trial
TrialHook = Callable[[int, int], tuple[Callable[[Purgatory, np.random.Generator], Purgatory], Callable]]


def check_split_invariance(trial_hook: TrialHook | None = None) -> None:
    """25 random workloads, cut into micro-batches at random: the outcomes equal ``reference``'s.

    ``trial_hook`` sends the shard through saved state between batches (``test_state``);
    every run draws the same trials.
    """
    rng = np.random.default_rng(42)
    for trial in range(25):
        # a state segment size per trial (tiny: bases are written and replaced often)
        after_batch, after_trial = (trial_hook or _in_memory)(trial, int(rng.integers(1, 30)))
        ops, events = _random_workload(rng)
        expected = reference(ops, events)

        cuts = np.sort(rng.choice(np.arange(1, len(events)), size=int(rng.integers(1, 8)), replace=False))
        event_batches = np.split(np.arange(len(events)), cuts)
        p = purgatory(tick_ms=int(rng.integers(1, 50)), wheel_size=int(rng.integers(2, 10)))
        got: dict[str, tuple[str, int]] = {}
        pending_ops = sorted(ops, key=lambda o: o["ts"])
        wm = 0
        for b in event_batches:
            batch_events = [events[i] for i in b]
            rng.shuffle(batch_events)  # ... and in any order within a batch
            first_ts = batch_events[0]["ts"] if batch_events else 10**9
            lo = min(e["ts"] for e in batch_events)
            # operations arrive before or after their events, never behind the watermark
            arriving = [o for o in pending_ops if o["ts"] < first_ts + 300 and o["ts"] >= wm]
            pending_ops = [o for o in pending_ops if o not in arriving]
            r = step(p, ops=arriving, events=batch_events, wm=wm)
            p = after_batch(p, rng)
            assert len(r.rejected) == 0, r.rejected
            got.update(_resolutions(r))
            wm = max(wm, min([lo] + [o["ts"] for o in pending_ops]))
        r = step(p, ops=pending_ops, wm=wm)
        got.update(_resolutions(r))
        r = step(p, wm=10**9)
        got.update(_resolutions(r))
        assert got == expected, f"trial {trial}"
        assert p.pending == 0 and p.buffered_events == 0
        after_trial(p)


def _random_workload(rng: np.random.Generator) -> tuple[list[dict], list[dict]]:
    """40 operations of every condition on 4 keys, 120 events in time order."""
    keys = [f"k{i}" for i in range(4)]
    ops = []
    for i in range(40):
        cond = rng.choice(["any", "count", "sum", "offset", "all"])
        n_keys = 1 + int(rng.random() < 0.3)
        o = op(
            f"o{i}",
            sorted(set(rng.choice(keys, n_keys).tolist())),
            int(rng.integers(0, 800)),
            timeout_ms=int(rng.integers(0, 400)),
            condition=str(cond),
        )
        if cond == "all":
            o["members"] = sorted(set(rng.choice(["s0", "s1", "s2"], int(rng.integers(1, 3))).tolist()))
        elif cond != "any":
            o["target"] = float(rng.integers(1, 4) * (10 if cond != "count" else 1))
        ops.append(o)
    events = []
    for _j in range(120):
        e = ev(str(rng.choice(keys)), int(rng.integers(0, 1200)), value=float(rng.integers(0, 15)))
        if rng.random() < 0.3:
            e["source"] = f"s{rng.integers(0, 3)}"
        if rng.random() < 0.1:
            e["op_id"] = f"o{rng.integers(0, 40)}"
        events.append(e)
    events.sort(key=lambda e: e["ts"])  # events arrive in time order between batches ...
    return ops, events


def _resolutions(result: BatchResult) -> dict[str, tuple[str, int]]:
    return {row["op_id"]: (row["status"], row["resolved_at"]) for row in result.outcomes.to_dict("records")}


def _in_memory(trial: int, segment_rows: int) -> tuple[Callable, Callable]:
    return (lambda p, rng: p), (lambda p: None)
