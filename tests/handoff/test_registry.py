"""The op_id registry (``engine.registry``): a repeated op_id is one operation whichever shard
its keys hash to, with no group that sees every operation (no Spark).

``Sharded`` (``test_multikey``) plays the host: each operation carries its op_id's registry
shard (here fixed by ``REGISTRY``), a home that is not the registry parks it and the
registry gets its claim in the same micro-batch, and the verdicts come back in the next.
"""

from __future__ import annotations

import pandas as pd

from tests.handoff.test_multikey import Sharded, one_purgatory, resolved
from tests.support.engine_helpers import ev, op, stacked

#: keys a and c live in shard 0, b and d in shard 1
SHARD_OF = {"a": 0, "b": 1, "c": 0, "d": 1}
#: every op_id's registry is shard 1: shard 0 parks its operations, shard 1 decides its own at once
REGISTRY = {"x": 1, "y": 1, "solo": 1}.get


def cluster(tmp_path) -> Sharded:
    return Sharded(SHARD_OF, 2, str(tmp_path / "mailbox"), registry=REGISTRY)


def rejected(c: Sharded) -> list[tuple[str, str, str]]:
    rows = pd.concat(c.rejected, ignore_index=True)
    return sorted(zip(rows["op_id"], rows["key"], rows["reason"], strict=True))


def test_an_op_id_repeated_with_keys_in_another_shard_later_is_rejected(tmp_path):
    c = cluster(tmp_path)
    first = c.step([op("x", "a", 100, 500)], [ev("a", 150)], wm=0)  # parked in shard 0
    second = c.step([op("x", "b", 200, 500)], [ev("b", 250)], wm=100)  # shard 1 refuses it at once
    third = c.step((), (), wm=200)
    outcomes = stacked([first, second, third])
    assert resolved(outcomes) == {"x": ("completed", 150, 1, 1.0)}
    assert rejected(c) == [("x", "b", "duplicate_op_id")]


def test_an_op_id_repeated_with_keys_in_another_shard_in_the_same_micro_batch_keeps_the_earliest(tmp_path):
    c = cluster(tmp_path)
    ops = [op("x", "b", 120, 500), op("x", "a", 100, 500)]  # a's copy is earlier in event time
    outcomes = [c.step(ops, [ev("a", 150), ev("b", 160)], wm=0), c.step((), (), wm=0)]
    assert resolved(stacked(outcomes)) == {"x": ("completed", 150, 1, 1.0)}
    assert rejected(c) == [("x", "b", "duplicate_op_id")]
    # the event the refused copy would have matched is reported as one purgatory reports it
    unmatched = pd.concat(c.unmatched, ignore_index=True)
    assert unmatched.empty  # not final yet: the watermark has not passed 160
    c.step((), (), wm=1000)
    unmatched = pd.concat(c.unmatched, ignore_index=True)
    assert sorted(zip(unmatched["key"], unmatched["reason"], strict=True)) == [("b", "no_operation")]


def test_a_parked_operation_is_decided_as_one_purgatory_decides_it_a_micro_batch_later(tmp_path):
    c = cluster(tmp_path)
    batches = [
        ([op("solo", "a", 100, 500, "count", target=2)], [ev("a", 300)], 0),
        ([], [ev("a", 200)], 50),  # earlier in event time, in the next micro-batch
        ([], [], 700),
    ]
    per_batch = [c.step(o, e, wm) for o, e, wm in batches]
    assert per_batch[0].empty  # parked: its verdict comes in the next micro-batch
    assert resolved(per_batch[1]) == {"solo": ("completed", 300, 2, 2.0)}
    assert resolved(per_batch[1]) == resolved(one_purgatory(batches))


def test_a_parked_operation_due_on_arrival_expires_at_its_deadline(tmp_path):
    c = cluster(tmp_path)
    first = c.step([op("x", "a", 100, 0)], (), wm=100)  # timeout 0: due as it arrives
    second = c.step((), (), wm=100)
    assert first.empty
    assert resolved(second) == {"x": ("expired", 100, 0, 0.0)}


def test_the_registry_remembers_an_op_id_it_released_for_the_dedup_retention(tmp_path):
    c = cluster(tmp_path)
    c.step([op("y", "c", 100, 100)], (), wm=0)  # parked in shard 0, registered in shard 1
    c.step((), (), wm=300)  # expires at 200
    c.step([op("y", "d", 400, 100)], (), wm=300)  # within the retention: refused in shard 1
    assert rejected(c) == [("y", "d", "duplicate_op_id")]


# -- a repeated op_id of an operation whose keys span shards (the cross-shard group's own check) --

#: k0 in shard 0, k1 in shard 1, k2 in shard 2
CROSS = {"k0": 0, "k1": 1, "k2": 2}


def test_a_refused_copys_stubs_add_nothing_to_the_operation_it_repeats(tmp_path):
    """Both copies span shards; the second watches k1, which the first does not: the events
    its stub relays are not the first's, and are reported as if the stub never was."""
    c = Sharded(CROSS, 3, str(tmp_path / "mailbox"), registry=REGISTRY)
    first = op("m", ["k0", "k2"], 100, 200, "count", target=3)
    again = op("m", ["k0", "k1"], 150, 200, "count", target=3)
    outcomes = [
        c.step([first, again], [ev("k0", 120), ev("k1", 160), ev("k2", 170)], wm=0),
        c.step((), (), wm=400),
        c.step((), (), wm=400),
        c.step((), (), wm=400),
    ]
    assert resolved(stacked(outcomes)) == {"m": ("expired", 300, 2, 2.0)}
    assert rejected(c) == [("m", "k0", "duplicate_op_id")]
    unmatched = pd.concat(c.unmatched, ignore_index=True)
    assert sorted(zip(unmatched["key"], unmatched["ts"], unmatched["reason"], strict=True)) == [
        ("k1", 160, "no_operation")
    ]


# -- the registry's decision against the rule written the obvious way ----------------------------------


def _decided_obviously(own, claims, shard, remembered, claim_remembered):
    """``registry.decide``'s rule, copy by copy: an op_id a copy of which is remembered is
    refused everywhere; otherwise its copy of the earliest ts wins, then the lowest home,
    then the first in input order (own copies first)."""
    copies = [
        (o["op_id"], o["ts"], shard, i, r) for i, (o, r) in enumerate(zip(own, remembered, strict=True))
    ]
    copies += [
        (c["op_id"], c["ts"], c["home"], len(own) + i, r)
        for i, (c, r) in enumerate(zip(claims, claim_remembered, strict=True))
    ]
    refused = {op_id for op_id, *_rest, r in copies if r}
    winner = {}
    for op_id, _ts, home, order, _r in sorted(copies, key=lambda c: (c[1], c[2], c[3])):
        if op_id not in refused and op_id not in winner:
            winner[op_id] = (home, order)
    own_ok = [winner.get(o["op_id"], (None,))[0] == shard for o in own]
    verdicts = {}
    for c in claims:
        verdicts.setdefault((c["op_id"], c["home"]), winner.get(c["op_id"], (None,))[0] == c["home"])
    # the claims that won, in the order they rank (``winner`` was filled in that order)
    registered = [
        (op_id, claims[order - len(own)]["deadline"])
        for op_id, (home, order) in winner.items()
        if home != shard
    ]
    return own_ok, verdicts, registered


def test_the_registry_decides_as_the_rule_reads_on_random_copies():
    import numpy as np

    from spark_purgatory.engine.arrays import hash_strings
    from spark_purgatory.engine.registry import decide
    from spark_purgatory.engine.rows import Rows

    rng = np.random.default_rng(7)
    for _trial in range(400):
        shard = int(rng.integers(0, 3))
        own = [
            {"op_id": f"o{i}", "ts": int(rng.integers(0, 4)), "deadline": int(rng.integers(4, 9))}
            for i in rng.choice(8, int(rng.integers(0, 6)), replace=False)  # unique: batch.admit
        ]
        claims = [
            {
                "op_id": f"o{rng.integers(0, 8)}",
                "ts": int(rng.integers(0, 4)),
                "deadline": int(rng.integers(4, 9)),
                "home": int(rng.integers(0, 3)),
            }
            for _ in range(int(rng.integers(0, 8)))
        ]
        claims = [c for c in claims if c["home"] != shard]  # a home claims only elsewhere
        remembered, claim_remembered = rng.random(len(own)) < 0.1, rng.random(len(claims)) < 0.1

        def rows(items, names):
            columns = {
                n: np.array([x[n] for x in items], dtype=object if n == "op_id" else np.int64) for n in names
            }
            return Rows(columns, len(items))

        mine = rows(own, ["op_id", "ts", "deadline"]).assign(
            ohash=hash_strings(np.array([o["op_id"] for o in own], object))
        )
        own_ok, verdicts, registered = decide(
            mine,
            rows(claims, ["op_id", "ts", "deadline", "home"]),
            shard,
            remembered,
            claim_remembered,
            watermark=0,
            retention_ms=10,
        )
        expected_ok, expected_verdicts, expected_registered = _decided_obviously(
            own, claims, shard, remembered, claim_remembered
        )
        assert own_ok.tolist() == expected_ok
        got = dict(
            zip(
                zip(verdicts["op_id"], verdicts["home"].tolist(), strict=True),
                verdicts["ok"].tolist(),
                strict=True,
            )
        )
        assert got == expected_verdicts and len(verdicts) == len(expected_verdicts)
        ids = np.array([op_id for op_id, _deadline in expected_registered], dtype=object)
        assert registered["hash"].tolist() == hash_strings(ids).tolist()
        assert (registered["expire_at"] - 10).tolist() == [
            deadline for _op_id, deadline in expected_registered
        ]


def test_a_home_with_an_operation_parked_expires_what_the_clock_makes_due_in_the_same_micro_batch(tmp_path):
    """Issue 67: a shard whose only input was one new operation, parked for its verdict, used
    to take the operator's clock one micro-batch late, so an operation due by it expired a
    micro-batch after the metrics row said its watermark had passed the deadline.  The verdict
    decides only the parked operation: the registered ones expire at once, while the events
    wait for the parked one (it may count them once registered)."""
    c = Sharded(SHARD_OF, 2, str(tmp_path / "mailbox"), registry={"q": 0, "p": 1}.get)
    assert c.step([op("q", "a", 100, 500)], wm=0).empty  # registered at home: its registry is shard 0
    # "p" parks in shard 0 (its registry is shard 1); the clock (1000) passes q's deadline (600)
    now = c.step([op("p", "c", 700, 5_000)], [ev("c", 800)], wm=0, clock=1_000)
    assert resolved(now) == {"q": ("expired", 600, 0, 0.0)}
    assert pd.concat(c.unmatched, ignore_index=True).empty  # c's event waits for the parked "p"
    then = c.step(wm=0)  # the verdict: "p" is registered and counts the event it arrived with
    assert resolved(then) == {"p": ("completed", 800, 1, 1.0)}
    assert pd.concat(c.unmatched, ignore_index=True).empty and pd.concat(c.rejected).empty
