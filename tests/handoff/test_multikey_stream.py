"""Multi-key operations across shards on real Spark: the mailbox hand-off, restarts, replays.

With ``purgatory.state.path`` set (``query.start`` always sets it), events go to their home
shard only; the primaries' stubs relay what they match to the cross-shard group through the
mailbox beside the shard state.  These scenarios check that Spark delivers the SPEC's
outcomes that way, exactly once across a restart that replays a micro-batch.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import pandas as pd
import pytest

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.handoff import Mailbox, Wake
from spark_purgatory.shard.roles import ROLES
from spark_purgatory.spark.key_hash import registry_of, shards_of
from spark_purgatory.spark.routing import route
from spark_purgatory.spark.sources import parse_events, parse_operations
from tests.spark.test_streaming import resolved
from tests.support.stream_helpers import T0, Files, ev, keys_in_different_shards, op, run_stream

pytestmark = pytest.mark.spark


CONFIG = PurgatoryConfig(shards=4, tick_ms=100, wheel_size=16, watermark_delay="1 second")


def _outcomes(*runs) -> dict[str, tuple[str, int]]:
    """Every run's outcomes; an operation reported twice fails."""
    got: dict[str, tuple[str, int]] = {}
    for run in runs:
        for op_id, outcome in resolved(run).items():
            assert op_id not in got, f"{op_id} reported twice"
            got[op_id] = outcome
    assert sum(len(run.outcomes) for run in runs) == len(got)
    return got


def _drop_last_commit(checkpoint: str) -> int:
    """Removes the last micro-batch's commit and its checksum, as a crash before the commit
    leaves them: the next run runs that micro-batch again (its relays too).  Its id."""
    commits = os.path.join(checkpoint, "commits")
    last = max(int(name) for name in os.listdir(commits) if name.isdigit())
    for name in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    return last


def _rows(frame: pd.DataFrame, batch: int) -> list[tuple]:
    """Micro-batch ``batch``'s rows of ``frame``, comparable across runs."""
    rows = frame[frame["batch_id"] == batch].drop(columns="batch_id")
    return sorted(tuple(map(repr, row)) for row in rows.itertuples(index=False))


def test_multi_key_operations_hand_off_through_the_mailbox_across_a_restart_and_a_replay(spark, tmp_path):
    """The restart begins by running the first run's last micro-batch again (its commit
    removed, as a crash before the commit leaves it), where the cross-shard group takes in
    the stubs' relays of the micro-batch before: counted twice, b@1200 would complete
    ``mk-count`` early and c@1100 ``mk-expire``.  The micro-batch run again gives the rows it
    gave the first time (a sink keeps one copy of a micro-batch's rows)."""
    config = dataclasses.replace(CONFIG, state_path=str(tmp_path / "state"), cross_shard_handoff="mailbox")
    a, b, c, d = keys_in_different_shards(4, 4)
    files = Files(str(tmp_path))
    files.add(
        ops=[op("pad-0", "pad-op-key", 0, 60_000)],
        events=[ev(c, 100, value=6), ev(d, 200, value=9), ev(a, 1500)],  # c, d: progress before hw
    )
    files.add(
        ops=[
            op("mk-count", [a, b], 1000, 5000, "count", target=3),  # a@1500 came before it
            op("mk-offset", [c, d], 1000, 5000, "offset", target=5),  # c, d reached it already
            op("mk-expire", [a, c], 1000, 2000, "count", target=3),
        ],
        events=[ev(b, 1200), ev(c, 1100, value=1)],
    )
    first = run_stream(spark, files, config)
    replayed = _drop_last_commit(files.checkpoint)
    # after a restart; d@2700 comes after mk-offset's completion, inside its window
    files.add(ops=[op("pad-1", "pad-op-key", 2500, 60_000)], events=[ev(b, 2600), ev(d, 2700, value=1)])
    files.add(ops=[op("pad-2", "pad-op-key", 9000, 60_000)], events=[ev("pad", 9000)])  # both inputs on
    # the watermark passes d@2700 (its stub's notice) and moves again (the cross-shard group's answer)
    files.add(ops=[op("pad-3", "pad-op-key", 20_000, 60_000)], events=[ev("pad", 20_000)])
    second = run_stream(spark, files, config)
    assert min(second.watermarks) == replayed  # the restart began with the replayed micro-batch
    for frame in ("outcomes", "unmatched", "rejected"):  # which it ran as it ran it the first time
        assert _rows(getattr(first, frame), replayed) == _rows(getattr(second, frame), replayed)
    first = dataclasses.replace(
        first, **{f: getattr(first, f).query(f"batch_id != {replayed}") for f in ("outcomes", "unmatched")}
    )
    assert _outcomes(first, second) == {
        "mk-offset": ("completed", 1000),  # progress reached before the operation existed
        "mk-count": ("completed", 2600),
        "mk-expire": ("expired", 3000),
    }
    expired = second.outcomes[second.outcomes["op_id"] == "mk-expire"].iloc[0]
    assert expired["matched_events"] == 2  # a@1500 and c@1100, from two shards
    unmatched = pd.concat([first.unmatched, second.unmatched])
    assert sorted(zip(unmatched["key"], unmatched["reason"], strict=True)) == sorted(
        [
            (d, "after_resolution"),  # reported once, by the cross-shard group
            # c@100 and d@200 raised mk-offset's progress before it existed: not its matched
            # events, and no operation's window holds them
            (c, "no_operation"),
            (d, "no_operation"),
            ("pad", "no_operation"),
        ]
    )
    assert os.path.isdir(Mailbox.beside(config.state_path).root)  # the hand-off went this way


def test_co_located_keys_need_no_stub_and_batch_mode_replicates_only_watched_keys(spark):
    config = PurgatoryConfig(shards=8, shard_key_delimiter=":")
    a, b, c = keys_in_different_shards(8, 3)
    as_text = "value string"
    ops = parse_operations(
        spark.createDataFrame(
            [
                (op("order", ["order-7:payment", "order-7:shipment"], 0, 100),),
                (op("spread", [a, b], 0, 100),),
            ],
            as_text,
        ),
        "json",
        max_timeout_ms=config.max_timeout_ms,
    )
    events = parse_events(spark.createDataFrame([(ev(a, 10),), (ev(c, 20),)], as_text), "json")
    routed = route(ops, events, config).collect()
    roles = sorted((r.op_id or r.key, ROLES[r.role]) for r in routed)  # roles travel as numbers
    assert roles == sorted(
        [
            ("order", "op"),  # one shard: the shard of order-7
            ("spread", "op"),  # the cross-shard group ...
            ("spread", "stub"),
            ("spread", "stub"),  # ... and a stub in each shard of its keys
            (a, "event"),
            (a, "replica"),  # a is watched by a cross-shard operation
            (c, "event"),
        ]
    )


def _relaying_input(files: Files, a: str, b: str) -> None:
    """Two micro-batches: the first moves both inputs' watermarks (to 4000); the second
    relays what completes ``mk`` and moves neither, so Spark runs no batch after it."""
    files.add(ops=[op("pad", "pad-op-key", 9000, 60_000)], events=[ev("pad", 9000)])
    files.add(ops=[op("mk", [a, b], 5000, 10_000, "count", target=2)], events=[ev(a, 5100), ev(b, 5200)])


def _started(spark, files: Files, tmp_path, trigger: str):
    from spark_purgatory import start

    config = PurgatoryConfig(
        shards=4, tick_ms=100, wheel_size=16, watermark_delay="5 seconds", source_max_files_per_trigger=1
    )
    return start(
        files.ops,
        files.events,
        output=str(tmp_path / "tables"),
        checkpoint=files.checkpoint,
        config=config,
        trigger=trigger,
        spark=spark,
    )


def _completed(tmp_path) -> dict[str, tuple[str, int]]:
    from deltalake import DeltaTable

    table = DeltaTable(str(tmp_path / "tables" / "outcomes")).to_pandas()
    return {
        r.op_id: (r.status, int(pd.Timestamp(r.resolved_at).value // 1_000_000) - T0)
        for r in table.itertuples()
    }


def test_an_available_now_run_ending_on_relays_runs_once_more(spark, tmp_path):
    a, b = keys_in_different_shards(4, 2)
    files = Files(str(tmp_path))
    _relaying_input(files, a, b)
    with _started(spark, files, tmp_path, "available-now") as purgatory:
        first = purgatory.query.id, purgatory.query.runId
        purgatory.await_termination()
        # the run's one micro-batch relayed; nothing would call the cross-shard group again
        assert purgatory.query.runId != first[1] and purgatory.query.id == first[0]
    assert _completed(tmp_path) == {"mk": ("completed", 5200)}
    # 0: the registry's verdict on "pad", parked in its home for a call (engine.registry); 1: mk's relays
    assert Wake.under(files.checkpoint).batches() == [0, 1]


def test_an_operation_held_for_a_relay_nobody_posts_expires_in_the_run_after(spark, tmp_path):
    """Keys in two shards, ``timeout_ms`` 0 at the watermark (4000): due on arrival, held by
    the cross-shard group (in its first call, its wheel behind the watermark) for its stubs'
    relay of the micro-batch, which has nothing to relay; the watermark stalls.  The group's
    ``relayed`` figure asks for the wake all the same."""
    a, b = keys_in_different_shards(4, 2)
    home = int(shards_of(np.array(["pad-op-key"], dtype=object), 4)[0])
    # an op_id whose registry is its home: no verdict is posted, whose wake would call every group
    pad = next(f"pad-{i}" for i in range(100) if registry_of(f"pad-{i}", 4) == home)
    files = Files(str(tmp_path))
    files.add(ops=[op(pad, "pad-op-key", 9000, 60_000)], events=[ev("pad", 9000)])
    files.add(ops=[op("due", [a, b], 4000, 0)], events=[])
    with _started(spark, files, tmp_path, "available-now") as purgatory:
        first = purgatory.query.runId
        purgatory.await_termination()
        assert purgatory.query.runId != first  # the wake's run
    assert _completed(tmp_path) == {"due": ("expired", 4000)}
    assert Wake.under(files.checkpoint).batches() == [1]  # asked for by the held operation alone


def test_relays_reach_the_cross_shard_group_when_both_inputs_go_quiet(spark, tmp_path):
    a, b = keys_in_different_shards(4, 2)
    files = Files(str(tmp_path))
    _relaying_input(files, a, b)
    with _started(spark, files, tmp_path, "processing-time=1s") as purgatory:
        deadline = time.monotonic() + 120
        while purgatory.totals["completed"] == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
            assert purgatory.query.exception() is None
        assert purgatory.totals["completed"] == 1  # in micro-batch 2: the wake file's
        assert purgatory.totals["batches"] == 3
    assert _completed(tmp_path) == {"mk": ("completed", 5200)}


def test_an_op_id_repeated_with_keys_in_other_shards_has_one_outcome(spark, tmp_path):
    """The op_id registry (``engine.registry``) through ``start()``: a copy in a later
    micro-batch and one in the same micro-batch, each with keys in another shard."""
    from deltalake import DeltaTable

    a, b = keys_in_different_shards(4, 2)
    files = Files(str(tmp_path))
    files.add(
        ops=[op("dup", a, 1000, 5000), op("twin", a, 1000, 5000), op("twin", b, 900, 5000)],
        events=[ev(a, 1500), ev(b, 1600)],
    )
    files.add(ops=[op("dup", b, 2000, 5000)], events=[ev(b, 2500)])
    with _started(spark, files, tmp_path, "available-now") as purgatory:
        purgatory.await_termination()
    # dup: the first micro-batch's copy; twin: of one micro-batch's copies, the earliest (b's)
    assert _completed(tmp_path) == {"dup": ("completed", 1500), "twin": ("completed", 1600)}
    rejected = DeltaTable(str(tmp_path / "tables" / "rejected")).to_pandas()
    assert sorted(zip(rejected["op_id"], rejected["key"], rejected["reason"], strict=True)) == [
        ("dup", b, "duplicate_op_id"),
        ("twin", a, "duplicate_op_id"),
    ]
