"""Multi-key operations across shards, on the engine and the mailbox (no Spark).

``Sharded`` plays the Spark host's part: it routes operations (stubs in the primary shards,
the operation in the cross-shard group) and events (home shard only), keeps each shard's
state as a saved value between micro-batches, and carries each primary's relay to the
cross-shard group through a ``Mailbox``, as ``spark.operator`` does.  The outcomes must be
those of one purgatory that holds every key (SPEC: the same ``resolved_at``; the
cross-shard group may emit one micro-batch later), and so must the events reported in
``unmatched_events`` (an event a stub matched is reported by the cross-shard group, on the
notice its primary sends when the event is final).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.engine.batch import with_keys
from spark_purgatory.engine.purgatory import Purgatory
from spark_purgatory.engine.validation import validate_events, validate_operations
from spark_purgatory.handoff import Mailbox, Wake
from spark_purgatory.state import load_state, save_state
from tests.support.engine_helpers import ev, frame, op, stacked

SETTINGS = {"tick_ms": 10, "wheel_size": 8}


class Sharded:
    """Primary shards, the cross-shard group and their mailbox, one ``step`` per micro-batch.

    With ``registry`` (op_id -> shard) it also plays the op_id registry (``engine.registry``):
    each operation carries its op_id's registry shard, a home that is not it parks the
    operation and its claim goes to the registry in the same micro-batch, whose verdicts
    come back in the next one."""

    def __init__(self, shard_of: dict[str, int], shards: int, root: str, registry=None) -> None:
        self.config = PurgatoryConfig(shards=shards, **SETTINGS)
        self.shard_of, self.shards = shard_of, shards
        self.states = {s: save_state(Purgatory(self.config)) for s in range(self.config.groups)}
        self.mailbox = Mailbox(root)
        self.registry = registry
        self.verdicts: list[pd.DataFrame] = []  # the last micro-batch's, for the next
        self.batch = 0
        self.unmatched: list[pd.DataFrame] = []
        self.rejected: list[pd.DataFrame] = []
        self.warnings: list[pd.DataFrame] = []

    def step(self, ops=(), events=(), wm: int = 0, clock: int | None = None) -> pd.DataFrame:
        """One micro-batch (``clock``: the operator's clock it brings, ``expire_to_ms``);
        returns its outcomes (every group's)."""
        valid_ops, _ = validate_operations(with_keys(frame(list(ops))), max_timeout_ms=10**9)
        valid_evs, _ = validate_events(frame(list(events)))
        if self.registry is not None:  # an operation whose keys span shards is outside it
            registry = valid_ops["op_id"].map(self.registry).where(self._home(valid_ops) < self.shards, -1)
            valid_ops = valid_ops.assign(registry=registry.astype("int64"))
        verdicts = pd.concat(self.verdicts, ignore_index=True) if self.verdicts else None
        self.verdicts, outcomes = [], []
        for shard in range(self.config.groups):
            p = load_state(self.states[shard], self.config)
            p.shard = shard
            mine_ops, mine_evs, relayed = self._input(shard, valid_ops, valid_evs, p)
            claims = self._claims(shard, valid_ops) if self.registry is not None else None
            result = p.process(
                mine_ops,
                mine_evs,
                watermark_ms=wm,
                validated=True,
                relayed=relayed,
                claims=claims,
                verdicts=verdicts,
                expire_to_ms=clock,
            )
            if shard < self.shards and len(result.relay):
                self.mailbox.post(shard, self.batch, result.relay)
            outcomes.append(result.outcomes)
            self.unmatched.append(result.unmatched)
            self.rejected.append(result.rejected)
            self.warnings.append(result.warnings)
            self.verdicts.append(result.verdicts)
            self.states[shard] = save_state(p)
        self.batch += 1
        return stacked(outcomes)

    def _home(self, ops: pd.DataFrame) -> pd.Series:
        shards_of = ops["keys"].map(lambda keys: sorted({self.shard_of[k] for k in keys}))
        return shards_of.map(lambda s: s[0] if len(s) == 1 else self.shards)

    def _claims(self, shard: int, ops: pd.DataFrame) -> pd.DataFrame:
        home = self._home(ops)
        claim = (ops["registry"] == shard) & (home != shard) & (home < self.shards)
        return pd.DataFrame(
            {
                "op_id": ops.loc[claim, "op_id"],
                "ts": ops.loc[claim, "ts"],
                "deadline": ops.loc[claim, "deadline"],
                "home": home[claim].astype("int64"),
            }
        )

    def _input(self, shard: int, ops: pd.DataFrame, evs: pd.DataFrame, p: Purgatory):
        shards_of = ops["keys"].map(lambda keys: sorted({self.shard_of[k] for k in keys}))
        cross = (shards_of.str.len() > 1).to_numpy(bool)
        if shard == self.shards:  # the cross-shard group: its operations and the mailbox
            before = p.relays_through
            relayed = self.mailbox.collect(before, self.batch)
            self.mailbox.clean(before)
            p.relays_through = max(before, self.batch - 1)
            return ops.loc[cross].assign(stub=False), evs.iloc[:0], relayed
        home = ops.loc[~cross & (shards_of.str[0] == shard).to_numpy(bool)].assign(stub=False)
        stubs = ops.loc[cross & shards_of.map(lambda s: shard in s).to_numpy(bool)]
        stubs = stubs.assign(keys=stubs["keys"].map(lambda ks: [k for k in ks if self.shard_of[k] == shard]))
        mine = evs.loc[evs["key"].map(self.shard_of).to_numpy() == shard]
        return pd.concat([home, stubs.assign(stub=True)], ignore_index=True), mine, None


def one_purgatory(batches: list[tuple[list, list, int]], table: str = "outcomes") -> pd.DataFrame:
    p = Purgatory(PurgatoryConfig(**SETTINGS))
    out = [getattr(p.process(frame(o), frame(e), watermark_ms=wm), table) for o, e, wm in batches]
    return stacked(out)


def reported(unmatched: pd.DataFrame) -> list[tuple]:
    """``unmatched_events`` rows as sorted (key, ts, op_id, reason): a row reported twice shows."""
    rows = unmatched[["key", "ts", "op_id", "reason"]].astype(object).where(unmatched.notna(), None)
    return sorted(tuple(r) for r in rows.itertuples(index=False))


def resolved(outcomes: pd.DataFrame) -> dict[str, tuple]:
    return {
        r.op_id: (
            r.status,
            r.resolved_at,
            r.matched_events,
            None if r.progress != r.progress else round(r.progress, 6),
        )
        for r in outcomes.itertuples()
    }


def run(tmp_path, batches, shard_of, shards=2) -> pd.DataFrame:
    return run_cluster(tmp_path, batches, shard_of, shards)[0]


def run_cluster(tmp_path, batches, shard_of, shards=2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Outcomes and unmatched events of the sharded run."""
    cluster = Sharded(shard_of, shards, str(tmp_path / "mailbox"))
    outcomes = stacked(cluster.step(o, e, wm) for o, e, wm in batches)
    return outcomes, pd.concat(cluster.unmatched, ignore_index=True)


TWO = {"a": 0, "b": 1, "c": 0, "d": 1}


def test_events_before_and_after_the_operation_complete_it_across_shards(tmp_path):
    batches = [
        ([], [ev("a", 100)], 0),  # buffered in shard 0 before the operation exists
        ([op("x", ["a", "b"], 50, 1000, "count", target=3)], [ev("b", 200)], 50),
        ([], [ev("a", 300)], 60),
        ([], [], 70),
    ]
    got = run(tmp_path, batches, TWO)
    assert resolved(got) == resolved(one_purgatory(batches)) == {"x": ("completed", 300, 3, 3.0)}


@pytest.mark.parametrize("targeted", [{"op_id": "o0"}, {}], ids=["targeted", "untargeted"])
def test_a_buffered_event_and_an_earlier_one_of_the_operations_micro_batch_decide_it_together(
    tmp_path, targeted
):
    """test_rescale's shrunk example (179 instead of 128): the stubs pair the operation with
    b@179, buffered before it, and with a@128, arriving with it; one purgatory decides the
    operation once against both, in event time, and so must the cross-shard group (a relay
    step per batch, not per stage)."""
    batches = [
        ([], [ev("b", 179)], 0),  # buffered in shard 1 before the operation exists
        ([op("o0", ["a", "b"], 1, 280)], [ev("a", 128, **targeted)], 0),
        ([], [], 10**6),  # every event final: the notices go out ...
        ([], [], 10**6),  # ... and the cross-shard group answers them
    ]
    outcomes, unmatched = run_cluster(tmp_path, batches, TWO)
    assert resolved(outcomes) == resolved(one_purgatory(batches)) == {"o0": ("completed", 128, 1, 1.0)}
    expected = [("b", 179, None, "after_resolution")]
    assert reported(unmatched) == reported(one_purgatory(batches, "unmatched")) == expected


def test_every_condition_across_shards_matches_one_purgatory(tmp_path):
    batches = [
        ([], [ev("a", 10, value=4.0), ev("b", 20, value=9.0)], 0),
        ([], [], 40),  # a@10 and b@20 are final: their progress is the keys' floor
        (
            [
                op("any", ["a", "b"], 50, 500),
                op("count", ["a", "b"], 50, 500, "count", target=3),
                op("sum", ["c", "d"], 50, 500, "sum", target=10),
                op("all", ["a", "d"], 50, 500, "all", members=["m1", "m2"]),
                op("offset", ["a", "b"], 50, 500, "offset", target=5),
                op("floor", ["a", "b"], 50, 500, "offset", target=4),
            ],
            [ev("d", 60, value=3.0, source="m2"), ev("b", 70, value=5.0)],
            50,
        ),
        ([], [ev("c", 80, value=8.0), ev("a", 90, value=6.0, source="m1"), ev("a", 95)], 60),
        ([], [], 600),
        ([], [], 700),
    ]
    got = resolved(run(tmp_path, batches, TWO))
    assert got == resolved(one_purgatory(batches))
    assert got["floor"] == ("completed", 50, 0, 4.0)  # both keys' progress was there before it
    assert got["offset"][:2] == ("completed", 90)


def test_expiry_waits_for_the_relay_of_the_batch_before(tmp_path):
    batches = [
        ([op("x", ["a", "b"], 0, 100, "count", target=2)], [ev("a", 10)], 0),
        ([], [ev("b", 99)], 90),  # the last event that can count, relayed in this batch ...
        ([], [], 200),  # ... and read before the wheel passes the deadline
    ]
    assert resolved(run(tmp_path, batches, TWO)) == {"x": ("completed", 99, 2, 2.0)}


def test_an_offset_operation_due_on_arrival_waits_for_its_floors(tmp_path):
    batches = [
        ([], [ev("a", 10, value=5.0), ev("b", 20, value=6.0)], 0),
        ([], [], 50),  # both events final: their progress is the keys' floors
        ([op("x", ["a", "b"], 50, 0, "offset", target=5)], [], 50),  # timeout 0: due at once
        ([], [], 60),
    ]
    got = resolved(run(tmp_path, batches, TWO))
    assert got == resolved(one_purgatory(batches)) == {"x": ("completed", 50, 0, 5.0)}


def test_expiry_at_the_deadline_with_the_events_of_both_shards(tmp_path):
    batches = [
        ([op("x", ["a", "b"], 0, 100, "count", target=3)], [ev("a", 10), ev("b", 20)], 0),
        ([], [ev("b", 100)], 50),  # at the deadline: outside the window
        ([], [], 200),
    ]
    assert resolved(run(tmp_path, batches, TWO)) == {"x": ("expired", 100, 2, 2.0)}


def test_an_event_two_operations_count_travels_once_for_each(tmp_path):
    cluster = Sharded(TWO, 2, str(tmp_path / "mailbox"))
    cluster.step([], [ev("a", 100)], 0)
    cluster.step([op("x", ["a", "b"], 50, 1000, "count", target=1)], [], 10)  # relays (a@100, x)
    assert resolved(cluster.step([], [], 20)) == {"x": ("completed", 100, 1, 1.0)}
    got = cluster.step([op("y", ["a", "b"], 60, 1000, "count", target=1)], [], 30)  # relays (a@100, y)
    assert cluster.mailbox.batches() == [(3, 0)]  # batch 1's file: received in 2, cleaned in 3
    assert len(got) == 0
    assert resolved(cluster.step([], [], 40)) == {"y": ("completed", 100, 1, 1.0)}


def test_an_event_after_the_completion_is_reported_after_resolution(tmp_path):
    batches = [
        ([op("x", ["a", "b"], 0, 1000, "count", target=1)], [ev("a", 10), ev("a", 15)], 0),
        ([], [ev("b", 20), ev("a", 30)], 5),  # x completed at 10: its stubs live until 1000
        ([], [ev("b", 40, op_id="x")], 20),  # targeted at x, resolved already
        ([], [], 100),  # every event final: the notices go out ...
        ([], [], 110),  # ... and the cross-shard group answers them
    ]
    outcomes, unmatched = run_cluster(tmp_path, batches, TWO)
    assert resolved(outcomes) == {"x": ("completed", 10, 1, 1.0)}
    after = "after_resolution"  # a@15: x matched it after its crossing; the rest came after x
    expected = [("a", 15, None, after), ("a", 30, None, after), ("b", 20, None, after), ("b", 40, "x", after)]
    assert reported(unmatched) == reported(one_purgatory(batches, "unmatched")) == expected


def test_the_events_of_an_expired_operation_are_counted_not_reported(tmp_path):
    batches = [
        ([op("x", ["a", "b"], 0, 100, "count", target=5)], [ev("a", 10), ev("b", 20, op_id="x")], 0),
        ([], [ev("b", 99), ev("a", 100)], 50),  # a@100 is at the deadline: outside the window
        ([], [], 200),
        ([], [], 210),
    ]
    outcomes, unmatched = run_cluster(tmp_path, batches, TWO)
    assert resolved(outcomes) == {"x": ("expired", 100, 3, 3.0)}
    assert (
        reported(unmatched)
        == reported(one_purgatory(batches, "unmatched"))
        == [("a", 100, None, "no_operation")]
    )


def test_an_event_a_local_operation_counts_is_not_reported(tmp_path):
    batches = [
        ([op("x", ["a", "b"], 0, 1000), op("y", ["a"], 0, 1000, "count", target=2)], [ev("a", 10)], 0),
        ([], [ev("a", 20)], 5),  # after x's completion, but y counts it
        ([], [], 100),
        ([], [], 110),
    ]
    outcomes, unmatched = run_cluster(tmp_path, batches, TWO)
    assert resolved(outcomes) == {"x": ("completed", 10, 1, 1.0), "y": ("completed", 20, 2, 2.0)}
    assert len(unmatched) == len(one_purgatory(batches, "unmatched")) == 0


def test_a_replayed_batch_receives_its_relays_once(tmp_path):
    cluster = Sharded(TWO, 2, str(tmp_path / "mailbox"))
    cluster.step([op("x", ["a", "b"], 0, 1000, "count", target=2)], [ev("a", 10)], 0)
    cluster.step([], [], 5)
    before = dict(cluster.states)  # the checkpoint before batch 2
    first = cluster.step([], [ev("b", 20)], 10)
    cluster.states, cluster.batch = before, 2  # batch 2 runs again from that checkpoint
    again = cluster.step([], [ev("b", 20)], 10)
    later = cluster.step([], [], 30)
    assert len(first) == len(again) == 0
    assert resolved(later) == {"x": ("completed", 20, 2, 2.0)}


def test_a_replayed_batch_answers_its_notices_once(tmp_path):
    cluster = Sharded(TWO, 2, str(tmp_path / "mailbox"))
    cluster.step([op("x", ["a", "b"], 0, 1000)], [ev("a", 10)], 0)  # relays (a@10, x)
    cluster.step([], [ev("a", 20)], 5)  # x completes at 10 in the cross-shard group; relays (a@20, x)
    cluster.step([], [], 100)  # a@10 and a@20 are final: their notices
    before, seen = dict(cluster.states), len(cluster.unmatched)
    assert load_state(before[2], cluster.config).awaited_notices == 2  # a@10 absorbed, a@20 not
    cluster.step([], [], 110)  # the cross-shard group answers them
    first = reported(pd.concat(cluster.unmatched[seen:]))
    cluster.states, cluster.batch, cluster.unmatched = before, 3, cluster.unmatched[:seen]
    cluster.step([], [], 110)  # batch 3 runs again from the checkpoint before it
    again = reported(pd.concat(cluster.unmatched[seen:]))
    cluster.step([], [], 120)
    assert (
        first
        == again
        == reported(pd.concat(cluster.unmatched[seen:]))
        == [("a", 20, None, "after_resolution")]
    )
    assert load_state(cluster.states[2], cluster.config).awaited_notices == 0  # answered: forgotten


@pytest.mark.parametrize("seed", [7, 11, 23])
def test_random_multi_key_workload_matches_one_purgatory(tmp_path, seed):
    rng = np.random.default_rng(seed)
    keys = [f"k{i}" for i in range(8)]
    shard_of = {k: i % 3 for i, k in enumerate(keys)}
    conditions = [
        ("any", {}),
        ("count", {"target": 3}),
        ("sum", {"target": 5.0}),
        ("offset", {"target": 4.0}),
        ("all", {"members": ["m1", "m2"]}),
    ]
    batches, n = [], 0
    for b in range(12):
        t0 = b * 100
        ops = []
        for _ in range(4):
            name, extra = conditions[rng.integers(len(conditions))]
            chosen = list(rng.choice(keys, size=rng.integers(1, 4), replace=False))
            start, timeout = t0 + int(rng.integers(0, 50)), int(rng.integers(50, 400))
            ops.append(op(f"o{n}", chosen, start, timeout, name, **extra))
            n += 1
        times = rng.choice(100, size=10, replace=False)  # no ties: equal times count in arrival order
        events = [
            ev(
                str(rng.choice(keys)),
                t0 + int(times[i]),
                value=float(rng.integers(0, 6)),
                source=str(rng.choice(["m1", "m2", "m3"])),
                op_id=f"o{rng.integers(n)}" if rng.random() < 0.2 else None,
            )
            for i in range(10)
        ]
        batches.append((ops, events, t0))
    batches += [([], [], 2000), ([], [], 2100)]
    got, unmatched = run_cluster(tmp_path, batches, shard_of, shards=3)
    assert len(got) == n
    assert resolved(got) == resolved(one_purgatory(batches))
    # none dropped, none twice, and the same reasons: a reason comes from the windows of the
    # operations that could have matched the event, which live in its shard (or, for a
    # cross-shard one, whose stub there hands the event on)
    assert reported(unmatched) == reported(one_purgatory(batches, "unmatched"))


def test_the_mailbox_on_s3(monkeypatch):
    pytest.importorskip("moto")
    import pickle

    from tests.support.object_store import S3Store

    s3 = S3Store()
    try:
        for name, value in s3.env.items():
            monkeypatch.setenv(name, value)
        box = pickle.loads(pickle.dumps(Mailbox.beside(s3.uri("state"), s3.storage)))  # as executors get it
        relay = relay_rows([("x", "a", 10), ("x", "a", 20)])
        box.post(sender=1, batch_id=3, rows=relay)
        box.post(sender=1, batch_id=3, rows=relay)  # a replayed batch rewrites its file
        box.post(sender=0, batch_id=4, rows=relay.iloc[:1])
        assert box.batches() == [(3, 1), (4, 0)]
        got = box.collect(after=2, before=5)
        assert got["batch"].tolist() == [3, 3, 4] and got["ts"].tolist() == [10, 20, 10]
        box.clean(through=3)
        assert box.batches() == [(4, 0)]
        assert s3.keys("state/mailbox") == ["state/mailbox/000000000000004-000000.arrow"]
    finally:
        s3.stop()


def relay_rows(pairs: list[tuple[str, str, int]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "for_op": [p[0] for p in pairs],
            "key": [p[1] for p in pairs],
            "ts": [p[2] for p in pairs],
            "op_id": None,
            "source": None,
            "value": np.nan,
            "stage": np.int8(1),
            "floor": False,
            "sender_eseq": np.arange(len(pairs)),
            "counted": False,
            "covered": False,
            "cancel": False,
        }
    )


def test_the_wake_owes_a_micro_batch_until_the_cross_shard_group_runs_after_the_relay(tmp_path):
    wake = Wake(str(tmp_path / "wake"), cross_shard=4)
    wake.after(0, relayed=False, shards={0, 1})
    assert wake.owed is None and wake.batches() == []
    wake.after(1, relayed=True, shards={0, 4})  # the group ran in 1, but before 1's relays
    assert wake.owed == 1 and wake.batches() == [1]
    wake.after(2, relayed=True, shards={1})  # not called: 1's relays still wait
    assert wake.owed == 1 and wake.batches() == [1, 2]
    wake.after(3, relayed=False, shards={0})
    assert wake.owed == 1
    wake.after(4, relayed=True, shards={4})  # received 1 and 2; 4's wait
    assert wake.owed == 4
    assert wake.batches() == [4]  # files of batches <= 2 were read by Spark by now
    wake.after(5, relayed=False, shards={4})
    assert wake.owed is None


def test_the_wake_owes_nothing_once_the_watermark_passed_the_receivers_timeouts(tmp_path):
    """A receiver (the cross-shard group, a shard that parked operations) keeps a timeout at
    its micro-batch's watermark: a later micro-batch whose watermark is past it called it (the
    wake waits for 2 ms past it)."""
    wake = Wake(str(tmp_path / "wake"), cross_shard=2, every_group=True)
    wake.after(0, relayed=True, shards={0, 1}, watermark=1000)  # group 2 not called
    assert wake.owed == 0
    wake.after(1, relayed=False, shards={0}, watermark=1001)  # within the margin
    assert wake.owed == 0
    wake.after(2, relayed=True, shards={1}, watermark=1002)  # 0's received, 2's owed
    assert wake.owed == 2
    wake.after(3, relayed=False, shards={1}, watermark=1004)
    assert wake.owed is None
    wake.after(4, relayed=True, shards={0}, watermark=None)  # no watermark known: owed until all ran
    wake.after(5, relayed=False, shards={0, 1}, watermark=9999)
    assert wake.owed == 4
    wake.after(6, relayed=False, shards={0, 1, 2}, watermark=9999)
    assert wake.owed is None


def test_registry_verdicts_are_owed_to_the_groups_their_micro_batch_called(tmp_path):
    """A registry answers each claim in the micro-batch it comes in, and a home parks only in
    a call of its own: a micro-batch's verdicts are received once every group it called ran
    again.  Without relays through the mailbox (``purgatory.cross.shard.operations=false``, or
    replicas) the cross-shard group is waited for only where it was called (a home then);
    with them it is waited for after every post (test above)."""
    wake = Wake(str(tmp_path / "wake"), cross_shard=2, every_group=True, relays=False)
    wake.after(0, relayed=True, shards={0, 1}, watermark=1000)  # verdicts for 0's and 1's claims
    assert wake.owed == 0
    wake.after(1, relayed=False, shards={1}, watermark=1000)  # home 0 not called yet
    assert wake.owed == 0
    wake.after(2, relayed=False, shards={0}, watermark=1000)  # both ran since: group 2 never waited
    assert wake.owed is None
    wake.after(3, relayed=True, shards={0, 2}, watermark=1000)  # the cross-shard group, a home here
    wake.after(4, relayed=False, shards={0, 1}, watermark=1000)
    assert wake.owed == 3
    wake.after(5, relayed=False, shards={2}, watermark=1000)
    assert wake.owed is None
    relaying = Wake(str(tmp_path / "wake-relays"), cross_shard=2, every_group=True)
    relaying.after(0, relayed=True, shards={0, 1}, watermark=1000)
    relaying.after(1, relayed=False, shards={0, 1}, watermark=1000)
    assert relaying.owed == 0  # a relay may be for the cross-shard group: it must run


def test_a_mailbox_created_while_the_cross_shard_group_lists_it_is_listed_again(tmp_path):
    """A race a clean clone's run hit (a new checkpoint, two tasks at once): the cross-shard
    group lists the mailbox as a primary shard creates it with its first relay.  Arrow's local
    listing then raises ``FileNotFoundError`` although ``allow_not_found`` is set (the listing
    failed, then the directory was there); the stream failed on it.  The listing is taken
    again, and finds the directory as it is by then."""
    import pyarrow.fs as pafs

    root = str(tmp_path / "mailbox")
    no_rows = pd.DataFrame({c: pd.Series([], dtype=t) for c, t in Mailbox(root).columns.items()})

    class PostedMeanwhile(pafs.LocalFileSystem):  # Arrow's local listing in the race, once
        raced = False

        def get_file_info(self, selector):
            if isinstance(selector, pafs.FileSelector) and not PostedMeanwhile.raced:
                PostedMeanwhile.raced = True
                Mailbox(root).post(sender=1, batch_id=3, rows=no_rows)  # the other task
                raise FileNotFoundError(f"[Errno 2] Cannot list directory '{selector.base_dir}'")
            return super().get_file_info(selector)

    box = Mailbox(root)
    box._fs = PostedMeanwhile()
    assert box.batches() == [(3, 1)]  # no crash, and the relay posted meanwhile is there
    assert PostedMeanwhile.raced
    box.clean(through=3)  # the cross-shard group's receive
    assert box.batches() == []
