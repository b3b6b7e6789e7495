"""Rescaling a stopped purgatory's shards (``state.reshard``): nothing lost, nothing twice.

The property: random operations (multi-key ones across shards, repeated op_ids, the registry
deciding them) and events, cut into micro-batches at random; a run on 2 primary shards is
resharded 2 -> 8 after one micro-batch and 8 -> 3 after another, in the state between runs
(saved values, the mailbox).  It must give the reference model's outcomes, unmatched events
and rejected rows, with operations homed and parked for their op_id's registry as the layout
of their micro-batch decides; with each input in event-time order, those of the layout never
resharded (with events out of order a parked operation sees the events of one more
micro-batch, the contract's exception).  Before each rescale point the run takes one micro-batch with no
input at the same watermark: what a stopped query's last ``available-now`` run leaves (the
relays received, parked operations decided), which ``rescale`` asks for.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import zlib

import numpy as np
import pandas as pd
import pyarrow.fs as pafs
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spark_purgatory import rescale as rescale_module
from spark_purgatory.checkpoint_paths import Checkpoint
from spark_purgatory.cli import main
from spark_purgatory.engine.purgatory import Purgatory
from spark_purgatory.handoff.end_of_input import EndOfInput
from spark_purgatory.rescale import RescaleError, rescale
from spark_purgatory.shard.labels import shard_labels, spark_hash_int
from spark_purgatory.spark import state_files
from spark_purgatory.spark.group_state import shard_bytes, to_group_state
from spark_purgatory.spark.key_hash import shards_of
from spark_purgatory.state import SegmentStore, load_state, save_state
from spark_purgatory.state.layout import RunLease, layout_of, recover
from spark_purgatory.state.reshard import ReshardError, reshard
from tests.engine.test_split_invariance import _result, _valid, scenarios
from tests.handoff.test_multikey import Sharded, reported, resolved
from tests.support.engine_helpers import stacked
from tests.support.reference_model import Batch, Result, run

KEYS = ["k0", "k1", "k2", "k3"]


def shard_of(shards: int) -> dict[str, int]:
    """Routing's shard of each key (``rescale`` sends the keys it moves there too)."""
    return dict(zip(KEYS, shards_of(np.array(KEYS, dtype=object), shards).tolist(), strict=True))


def registry(shards: int):
    return lambda op_id: zlib.crc32(op_id.encode()) % shards


class Rescalable(Sharded):
    """``Sharded`` whose shards can be resharded between micro-batches, as ``rescale`` does
    to a stopped checkpoint."""

    def __init__(self, shards: int, root: str) -> None:
        super().__init__(shard_of(shards), shards, root, registry=registry(shards))

    def rescale(self, shards: int) -> None:
        cross = load_state(self.states[self.shards], self.config)
        unreceived = [b for b, _ in self.mailbox.batches() if b > cross.relays_through]
        assert not unreceived, "relays in flight"
        old = {s: load_state(v, self.config) for s, v in self.states.items()}
        mapping = shard_of(shards)
        new = reshard(old, shards, lambda keys: [mapping[k] for k in keys])
        self.mailbox.clean(cross.relays_through)
        self.shards, self.shard_of, self.registry = shards, mapping, registry(shards)
        self.config = self.config.__class__(**{**self.config.__dict__, "shards": shards})
        self.states = {s: save_state(p) for s, p in new.items()}
        self.verdicts = []  # nothing parked: the last ones were received


def _paused(batches: list[Batch], plan: dict[int, int]) -> list[tuple[Batch, int]]:
    """The micro-batches a run takes, each with the shards it runs on: before batch i in
    ``plan``, one with no input at the last watermark, then ``plan[i]`` shards from batch i."""
    out, shards, last = [], 2, batches[0].watermark
    for i, b in enumerate(batches):
        if i in plan:
            out.append((Batch([], [], last), shards))
            shards = plan[i]
        out.append((b, shards))
        last = b.watermark
    return out


def _run(steps: list[tuple[Batch, int]], root: str) -> Result:
    """Run ``steps`` (``_paused``), resharding whenever the shards change."""
    cluster = Rescalable(2, root)
    outcomes = []
    for b, shards in steps:
        if shards != cluster.shards:
            cluster.rescale(shards)
        outcomes.append(cluster.step(_valid(b.ops), _valid(b.events), b.watermark))
    for _ in range(2):  # verdicts on the last micro-batch's parked operations, then their relays
        outcomes.append(cluster.step((), (), steps[-1][0].watermark))
    return _result(
        stacked(outcomes),
        pd.concat(cluster.unmatched, ignore_index=True),
        pd.concat(cluster.rejected, ignore_index=True),
        set(),
        stacked(cluster.warnings),
    )


def _reference(steps: list[tuple[Batch, int]]) -> Result:
    """The reference model over ``steps``, each operation homed and parked as the layout of
    its micro-batch decides (a parked operation is decided against the events arrived by the
    next micro-batch: with events out of event-time order the layout can change its outcome,
    the contract's one exception here)."""
    home, parks = {}, {}
    for b, shards in steps:
        mapping, owner = shard_of(shards), registry(shards)
        for o in b.ops:
            if o.get("_reason"):  # rejected by validation: neither homed nor parked
                continue
            spans = {mapping[k] for k in o["keys"]}
            cross = len(spans) != 1
            home[id(o)] = shards if cross else spans.pop()
            parks[id(o)] = not cross and owner(o["op_id"]) != home[id(o)]
    expected = run([b for b, _ in steps], home=lambda o: home[id(o)], parks=lambda o: parks[id(o)])
    return Result(
        expected.outcomes,
        expected.unmatched,
        [r for r in expected.rejected if r[1] in ("late", "duplicate_op_id")],
        warnings=expected.warnings,
    )


def _one_kind_per_op_id(ops: list[dict]) -> bool:
    """The registry's limits (docs/contract.md): no op_id both of an operation whose keys
    span shards and of one whose keys do not, in any of the layouts run; and no two copies of
    an op_id at the same ``ts`` (of such copies in one micro-batch the lowest-numbered
    shard's is kept: the layout decides which copy, as the split does)."""
    valid = [(o["op_id"], o["ts"]) for o in ops if not o.get("_reason")]
    if len(set(valid)) < len(valid):
        return False
    for shards in (2, 8, 3):
        mapping, kinds = shard_of(shards), {}
        for o in ops:
            if not o.get("_reason"):
                kinds.setdefault(o["op_id"], set()).add(len({mapping[k] for k in o["keys"]}) > 1)
        if any(len(k) > 1 for k in kinds.values()):
            return False
    return True


@settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    deadline=None,
    max_examples=max(8, settings.default.max_examples // 15),  # a sharded run, resharded twice, per draw
)
@given(scenario=scenarios(), cuts=st.tuples(st.integers(1, 7), st.integers(1, 7)))
def test_a_run_resharded_2_8_3_gives_the_outcomes_of_the_run_never_resharded(
    tmp_path_factory, scenario, cuts
):
    """The resharded run gives the reference's results for its layouts; with each input in
    event-time order those are the results of the layout never resharded (2 shards
    throughout), which a run on 2 shards gives (``test_split_invariance``'s properties check
    sharded runs against the reference on their own draws)."""
    assume(_one_kind_per_op_id(scenario["ops"]))
    batches = scenario["batches"]
    first, second = sorted(c % len(batches) for c in cuts)
    plan = {first: 8, second: 3} if second > first else {first: 8}
    if second == first:
        plan[first] = 3  # straight to 3
    resharded = _paused(batches, plan)
    got, reference = _run(resharded, str(tmp_path_factory.mktemp("resharded"))), _reference(resharded)
    assert (got.outcomes, got.unmatched, got.rejected, got.warnings) == (
        reference.outcomes,
        reference.unmatched,
        reference.rejected,
        reference.warnings,
    )
    if scenario["ordered"]:  # then where an operation is parked changes nothing
        kept = _reference(_paused(batches, {i: 2 for i in plan}))
        assert (got.outcomes, got.unmatched, got.rejected, got.warnings) == (
            kept.outcomes,
            kept.unmatched,
            kept.rejected,
            kept.warnings,
        )


def test_parked_operations_are_refused_in_one_line(tmp_path):
    cluster = Rescalable(2, str(tmp_path))
    # an operation whose registry is not its home is parked for one micro-batch
    home = shard_of(2)["k0"]
    op_id = next(f"o{i}" for i in range(100) if registry(2)(f"o{i}") != home)
    cluster.step([{"op_id": op_id, "keys": ["k0"], "ts": 10, "timeout_ms": 100}], [], 0)
    with pytest.raises(ReshardError, match="parked .* run the query once more"):
        cluster.rescale(8)


# -- a stopped checkpoint: Spark's files, the journal, kill -9 at every step ---------------------------


def _workload(seed: int, batches: int = 8) -> list[tuple[list, list, int]]:
    """Operations (a third multi-key) and events over ``KEYS``, ``batches`` micro-batches."""
    rng = np.random.default_rng(seed)
    out, n = [], 0
    for b in range(batches):
        ops = []
        for _ in range(6):
            keys = sorted(set(rng.choice(KEYS, size=int(rng.integers(1, 3)))))
            cond = str(rng.choice(["any", "count", "sum", "offset"]))
            o = {
                "op_id": f"o{n}",
                "keys": keys,
                "ts": 100 * b + int(rng.integers(0, 100)),
                "timeout_ms": int(rng.integers(100, 900)),
                "condition": cond,
            }
            if cond != "any":
                o["target"] = float(rng.integers(2, 7))
            ops.append(o)
            n += 1
        evs = [
            {
                "key": str(rng.choice(KEYS)),
                "ts": 100 * b + int(rng.integers(0, 150)),
                "value": float(rng.integers(0, 3)),
            }
            for _ in range(6)
        ]
        out.append((ops, evs, max(0, 100 * b - 60)))
    return out


def _write_checkpoint(cluster: Rescalable, root, watermark: int, batch: int = 4) -> None:
    """What a stopped query leaves after micro-batch ``batch``: its offsets and commits entries
    and each shard group's value in Spark's state store (the groups' labels, their timeouts)."""
    conf = {
        "spark.sql.shuffle.partitions": str(cluster.config.groups),
        "spark.sql.streaming.stateStore.providerClass": state_files.HDFS_PROVIDER,
        "spark.sql.streaming.stateStore.compression.codec": "lz4",
        "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    }
    for log, meta in (
        ("offsets", {"batchWatermarkMs": watermark, "batchTimestampMs": 1_000 + batch, "conf": conf}),
        ("commits", {"nextBatchWatermarkMs": watermark}),
    ):
        (root / log).mkdir(parents=True, exist_ok=True)
        tail = '\n{"logOffset":3}' if log == "offsets" else ""
        (root / log / str(batch)).write_text("v1\n" + json.dumps(meta) + tail)
    labels = shard_labels(cluster.config.groups)
    fs = pafs.LocalFileSystem()
    groups = {p: [] for p in range(cluster.config.groups)}
    for s, value in cluster.states.items():
        g = state_files.GroupValue(labels[s], to_group_state(value, "text"), -1)
        groups[spark_hash_int(labels[s]) % cluster.config.groups].append(g)
    for p, entries in groups.items():
        state_files.write_version(fs, f"{root}/state/0", p, batch + 1, entries)  # batch N leaves N + 1


def _read_back(cluster: Rescalable, root, shards: int, batch: int) -> None:
    """The shards as the next run loads them: ``cluster`` continues on them."""
    fs = pafs.LocalFileSystem()
    config = cluster.config.__class__(**{**cluster.config.__dict__, "shards": shards})
    numbers = {label: n for n, label in enumerate(shard_labels(config.groups))}
    store = SegmentStore(str(root / "purgatory-state"))
    states = {s: save_state(Purgatory(config)) for s in range(config.groups)}
    for p in range(config.groups):
        for g in state_files.read_version(fs, f"{root}/state/0", p, batch + 1):
            states[numbers[g.label]] = save_state(load_state(shard_bytes(g.state), config, store))
    mapping = shard_of(shards)
    cluster.shards, cluster.shard_of, cluster.registry = shards, mapping, registry(shards)
    cluster.config, cluster.states, cluster.verdicts = config, states, []


def _started(root, seed: int = 3, upto: int = 4) -> tuple[Rescalable, list]:
    """A checkpoint that ran ``upto`` micro-batches of the workload on 2 shards, then stopped
    (its last run received every relay: one more micro-batch with no input)."""
    work = _workload(seed)
    cluster = Rescalable(2, str(root / "purgatory-state" / "mailbox"))
    outcomes = [cluster.step(o, e, wm) for o, e, wm in work[:upto]]
    outcomes.append(cluster.step((), (), work[upto - 1][2]))
    _write_checkpoint(cluster, root, work[upto - 1][2])
    return cluster, outcomes


def _finish_run(cluster: Rescalable, outcomes: list, work: list, start: int) -> tuple:
    for o, e, wm in work[start:]:
        outcomes.append(cluster.step(o, e, wm))
    for _ in range(3):
        outcomes.append(cluster.step((), (), 10_000))
    return (
        resolved(stacked(outcomes)),
        reported(pd.concat(cluster.unmatched, ignore_index=True)),
        len(pd.concat(cluster.rejected, ignore_index=True)),
    )


@pytest.fixture(scope="module")
def never_rescaled(tmp_path_factory):
    """The workload of a seed run on 2 shards throughout: what every test that rescales it must
    end with, run once per seed for all of them."""
    done: dict[int, tuple] = {}

    def of(seed: int) -> tuple:
        if seed not in done:
            kept, kept_out = _started(tmp_path_factory.mktemp("kept"), seed=seed)
            done[seed] = _finish_run(kept, kept_out, _workload(seed), 4)
        return done[seed]

    return of


def test_a_stopped_checkpoint_rescaled_2_to_8_continues_with_the_same_outcomes(tmp_path, never_rescaled):
    work = _workload(3)
    expected = never_rescaled(3)
    cluster, outcomes = _started(tmp_path / "chk")
    done = rescale(str(tmp_path / "chk"), 8)
    assert (done.from_shards, done.to_shards, done.batch) == (2, 8, 5)
    assert done.pending > 0 and sum(done.by_shard.values()) == done.pending
    _read_back(cluster, tmp_path / "chk", 8, 5)
    assert _finish_run(cluster, outcomes, work, 4) == expected
    assert layout_of(str(tmp_path / "chk"))["shards"] == 8
    offsets = (tmp_path / "chk" / "offsets" / "5").read_text().split("\n")
    assert json.loads(offsets[1])["conf"]["spark.sql.shuffle.partitions"] == "9"
    assert offsets[2] == '{"logOffset":3}'


def test_status_shows_the_layout_and_the_rescale_history(tmp_path, capsys):
    chk = str(tmp_path / "chk")
    _started(tmp_path / "chk")
    assert main(["rescale", "--checkpoint", chk, "--shards", "8"]) == 0
    assert "2 -> 8 shards as micro-batch 5" in capsys.readouterr().out
    assert main(["status", "--checkpoint", chk, "--no-state", "--json"]) == 0
    layout = json.loads(capsys.readouterr().out)["layout"]
    assert layout["shards"] == 8 and not layout["rescale_under_way"]
    assert [(h["batch"], h["from"], h["to"]) for h in layout["rescales"]] == [(5, 2, 8)]
    assert main(["status", "--checkpoint", chk, "--no-state"]) == 0
    assert "layout: 8 shards" in capsys.readouterr().out


_STEPS = ["read", "segments", "snapshots", "offsets", "commit", "finish"]


def _files(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("step", _STEPS)
def test_a_rescale_killed_at_each_step_leaves_one_complete_layout(tmp_path, never_rescaled, step):
    """kill -9 as the rescale reaches ``step``; ``recover`` then leaves the old layout exactly
    as it was (killed before the commit) or the new one complete (after it), and the run
    continues with the outcomes of the run never rescaled."""
    work = _workload(5)
    chk = tmp_path / "chk"
    cluster, outcomes = _started(chk, seed=5)
    before = _files(chk)
    code = f"from spark_purgatory.rescale import rescale; rescale({str(chk)!r}, 3)"
    env = {**os.environ, rescale_module.FAULT: step}
    killed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    journal = pathlib.Path(Checkpoint(str(chk)).rescale_journal)
    assert journal.exists() == (step != "read")  # the journal comes first
    how = recover(str(chk))
    assert not journal.exists()
    if _STEPS.index(step) < _STEPS.index("finish"):
        assert how == (None if step == "read" else "rolled back")
        assert _files(chk) == before  # the old layout, byte for byte
        rescale(str(chk), 3)  # and it can be rescaled after all
    else:
        assert how == "finished"
    assert layout_of(str(chk))["shards"] == 3
    _read_back(cluster, chk, 3, 5)
    assert _finish_run(cluster, outcomes, work, 4) == never_rescaled(5)


def test_what_rescale_refuses_it_says_in_one_line(tmp_path):
    chk = tmp_path / "chk"
    cluster, _ = _started(chk)
    lines = []

    def refused(match: str, shards: int = 4) -> None:
        with pytest.raises(RescaleError, match=match) as e:
            rescale(str(chk), shards)
        lines.append(str(e.value))

    refused("already runs 2 shards", 2)
    lease = RunLease(str(chk))
    lease.take()  # this process: alive
    refused("a query runs on .* stop it first")
    lease.release()
    (chk / "offsets" / "5").write_text((chk / "offsets" / "4").read_text())
    refused("micro-batch 5 .* did not commit")
    (chk / "offsets" / "5").unlink()
    offsets = (chk / "offsets" / "4").read_text()
    rocks = offsets.replace("HDFSBackedStateStoreProvider", "RocksDBStateStoreProvider")
    (chk / "offsets" / "4").write_text(rocks)
    refused("format rescale does not know .*RocksDB")
    (chk / "offsets" / "4").write_text(offsets)
    cross = {"op_id": "x", "keys": ["k0", "k2"], "ts": 900, "timeout_ms": 50}  # k0, k2: two shards
    cluster.step([cross], [{"key": "k0", "ts": 901}], 0)
    _write_checkpoint(cluster, chk, 0)
    refused("relays to the cross-shard group are not received yet")
    EndOfInput(str(chk)).declare()
    refused("input of .* has ended")
    assert all("\n" not in line for line in lines)


def test_a_checkpoint_on_s3_is_rescaled_in_place(tmp_path, never_rescaled, monkeypatch):
    """The checkpoint, Spark's state files and the segments in a bucket (moto on loopback), the
    rescale given the query's ``s3a://`` URI and the ``storage.*`` settings, as on a cluster:
    the same outcomes as the run never rescaled."""
    from tests.support.object_store import ENV, S3Store

    for name, value in ENV.items():
        monkeypatch.setenv(name, value)  # the standard AWS variables, as a user exports them
    work = _workload(3)
    expected = never_rescaled(3)
    cluster, outcomes = _started(tmp_path / "chk")
    store = S3Store(bucket="purgatory-rescale")
    try:
        fs, bucket = store.storage.filesystem(store.uri())
        pafs.copy_files(str(tmp_path / "chk"), f"{bucket}/chk", destination_filesystem=fs)
        checkpoint = store.uri("chk", scheme="s3a")  # as the query's checkpoint is named
        done = rescale(checkpoint, 8, storage=store.storage)
        assert (done.from_shards, done.to_shards, done.pending > 0) == (2, 8, True)
        assert layout_of(checkpoint, storage=store.storage)["shards"] == 8
        back = tmp_path / "back"
        pafs.copy_files(f"{bucket}/chk", str(back), source_filesystem=fs)
    finally:
        store.stop()
    _read_back(cluster, back, 8, 5)
    assert _finish_run(cluster, outcomes, work, 4) == expected


def test_shards_rescaled_away_leave_no_delta_files_and_the_rest_continue(tmp_path, never_rescaled):
    work = _workload(3)
    expected = never_rescaled(3)
    cluster, outcomes = _started(tmp_path / "chk")
    rescale(str(tmp_path / "chk"), 8)
    done = rescale(str(tmp_path / "chk"), 2)  # shards 3 to 8 of the 8-shard layout go
    assert (done.from_shards, done.to_shards) == (8, 2)
    store = SegmentStore(str(tmp_path / "chk" / "purgatory-state"))
    assert {name.split("/")[1] for name in store.delta_files()} <= {"shard-0", "shard-1", "shard-2"}
    _read_back(cluster, tmp_path / "chk", 2, done.batch)
    assert _finish_run(cluster, outcomes, work, 4) == expected


# -- what a rescale keeps: what the shard step keeps ------------------------------------------------------


def _groups_at(root, config, version: int) -> dict[int, tuple[Purgatory, int]]:
    """Each shard group Spark's state holds at ``version``: its engine and its timeout."""
    fs = pafs.LocalFileSystem()
    numbers = {label: n for n, label in enumerate(shard_labels(config.groups))}
    store = SegmentStore(str(root / "purgatory-state"))
    out = {}
    for p in range(config.groups):
        for g in state_files.read_version(fs, f"{root}/state/0", p, version):
            out[numbers[g.label]] = (load_state(shard_bytes(g.state), config, store), g.timeout_ms)
    return out


@pytest.mark.parametrize("situation", ["ended", "clocked", "neither"])
def test_an_empty_shard_survives_a_rescale_as_the_shard_step_keeps_it(tmp_path, situation):
    """A primary shard holding nothing keeps its state through a micro-batch when its input
    ended (the end watermark) or the operator's clock moved it past Spark's watermark
    (``shard.step.decide``); the shards a rescale makes of it keep it the same way, with the
    same timeout; an empty shard with neither goes in both."""
    from types import SimpleNamespace

    from spark_purgatory.config import PurgatoryConfig
    from spark_purgatory.handoff.end_of_input import end_watermark_ms
    from spark_purgatory.shard.step import ShardStep
    from spark_purgatory.testing.local_shards import routed

    spark_wm = 5_000
    chk = tmp_path / "chk"
    config = PurgatoryConfig(shards=2, state_path=str(chk / "purgatory-state"))
    own = {"ended": end_watermark_ms(config.max_timeout_ms, config.tick_ms), "clocked": 9_000}
    shard_wm = own.get(situation, spark_wm)
    states = {0: save_state(Purgatory(config, start_ms=shard_wm)), 1: save_state(Purgatory(config))}
    states[2] = save_state(Purgatory(config))  # the cross-shard group
    # the shard step, called on the empty shard at Spark's watermark: it keeps it or drops it
    nothing = routed(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), config)
    stepped = ShardStep(config)(0, nothing, states[0], watermark_ms=spark_wm, batch_time_ms=1_000)
    kept = stepped.value is not None
    assert kept == (situation != "neither")
    _write_checkpoint(SimpleNamespace(config=config, states=states), chk, spark_wm)
    rescale(str(chk), 3, config=config)
    groups = _groups_at(chk, PurgatoryConfig(**{**config.__dict__, "shards": 3}), 6)
    assert sorted(groups) == ([0, 1, 2, 3] if kept else [3])  # the cross-shard group stays (mailbox)
    for shard in range(3 if kept else 0):  # every new primary takes the old primaries' watermark
        p, timeout = groups[shard]
        assert (p.is_empty(), p.watermark, timeout) == (True, shard_wm, state_files.NO_TIMEOUT)
    assert stepped.timeout_ms is None


def test_an_operation_warned_on_a_shard_whose_clock_was_ahead_is_not_warned_again():
    """Shard 0 ran to 800 and warned ``a`` at 700; shard 1 stayed at 0 with ``b``.  The new
    shards resume at the earliest clock (0): ``b`` is still owed its warning, ``a`` is not."""
    from spark_purgatory.config import PurgatoryConfig

    config = PurgatoryConfig(shards=2, tick_ms=10)
    key = {s: next(k for k, home in shard_of(2).items() if home == s) for s in (0, 1)}
    old = {s: Purgatory(config) for s in range(3)}
    warned = []
    for s, op_id, wm in ((0, "a", 800), (1, "b", 0)):
        op = {"op_id": op_id, "key": key[s], "ts": 0, "timeout_ms": 1000, "warn_ms": 300}
        old[s].process(pd.DataFrame([op]), None, watermark_ms=0)
        warned.append(old[s].process(None, None, watermark_ms=wm).warnings)
    assert stacked(warned)["op_id"].tolist() == ["a"]
    new = reshard(
        {s: load_state(save_state(p), config) for s, p in old.items()},
        3,
        lambda keys: [shard_of(3)[k] for k in keys],
    )
    after = [p.process(None, None, watermark_ms=900, batch_id=1).warnings for p in new.values()]
    assert stacked(after)[["op_id", "warned_at"]].values.tolist() == [["b", 700]]
