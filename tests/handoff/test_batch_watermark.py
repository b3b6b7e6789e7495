"""The watermark a micro-batch's own rows bring, applied inside it (``shard.input.batch_watermark``).

Spark applies the watermark a micro-batch's rows propose in the *next* micro-batch; the shard
step moves there once the rows are admitted, so an operation their event times make due
expires in the micro-batch that read them.  The promise is only about *when*: against the
reference model (``reference_model``) with Spark's watermarks, on random workloads cut at
random, the outcomes, unmatched events, rejected rows and pending operations are the
contract's, every expiry comes no earlier than the watermark Spark runs the next micro-batch at
allows, and (one shard, which sees every row) no later than the micro-batch whose rows brought
a watermark past its deadline.  The production shard step runs, through ``LocalShards`` as the
tester plays Spark's host.
"""

from __future__ import annotations

import dataclasses
from itertools import zip_longest

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, assume, given, settings

from spark_purgatory import Purgatory, PurgatoryConfig
from spark_purgatory.engine.validation import validate_events, validate_operations
from spark_purgatory.spark.key_hash import registry_of
from spark_purgatory.testing.local_shards import LocalShards, routed
from tests.engine.test_split_invariance import (
    _WAKES,
    CONFIG,
    _inputs,
    _registry_limit,
    _result,
    assert_same,
    home_of,
    reference_with_wakes,
    scenarios,
)
from tests.support.engine_helpers import stacked
from tests.support.reference_model import Batch, spark_watermarks

_SLOW = dict(
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
    deadline=None,
    max_examples=max(10, settings.default.max_examples // 6),  # each draw saves state per shard and batch
)


def _stream(
    scenario: dict, shards: int, root: str, config: PurgatoryConfig | None = None
) -> tuple[dict, list[int]]:
    """The scenario's micro-batches through ``shards`` shards moving to their rows' watermark:
    (the results as the reference reads them, with each outcome's micro-batch; each micro-batch's
    Spark watermark, the end's included)."""
    delays = scenario["delays"]
    config = dataclasses.replace(
        config
        or PurgatoryConfig(
            tick_ms=CONFIG["tick_ms"],
            wheel_size=CONFIG["wheel_size"],
            max_timeout_ms=CONFIG["max_timeout_ms"],
        ),
        shards=shards,
        state_path=root,
        watermark_delay_operations=f"{delays[0]} milliseconds",
        watermark_delay_events=f"{delays[1]} milliseconds",
    )
    host = LocalShards(config, batch_watermark=True)
    batches = scenario["batches"]
    end = scenario["end"]
    done, marks = [], []
    for n, b in enumerate(batches):
        ending = end and n == len(batches) - 1
        wm = batches[n - 1].watermark if ending else b.watermark  # the end comes at the watermark before it
        ops, bad_ops = validate_operations(_inputs(b.ops), max_timeout_ms=config.max_timeout_ms)
        evs, bad_evs = validate_events(_inputs(b.events))
        rows = routed(ops, evs, pd.concat([bad_ops, bad_evs], ignore_index=True), config)
        calls = host.run(rows, wm, end=ending)
        for _ in range(_WAKES):  # the wake's micro-batches: a verdict taken in, then its relay
            calls += host.run(rows.iloc[:0], wm)
        done.append(calls)
        marks.append(b.watermark)

    none = Purgatory(config).process(None, None, watermark_ms=0)  # a call's empty rows

    def of(name: str) -> pd.DataFrame:
        frames = [getattr(none, name).assign(batch=0)]
        for n, calls in enumerate(done):
            for c in calls:
                frame = getattr(c.result, name)
                frames.append(frame.assign(batch=n))
                if name == "rejected":
                    frames.append(c.bad.assign(batch=n))
        return stacked(frames)

    engines = [host.step.load(g, v) for g, v in host.values.items()]
    pending = (
        {o for p in engines for o in p.pending_operations().query("~stub")["op_id"]} if engines else set()
    )
    outcomes = of("outcomes")
    result = _result(outcomes, of("unmatched"), of("rejected"), pending, of("warnings"))
    batch_of = dict(zip(outcomes["op_id"], outcomes["batch"], strict=True)) if len(outcomes) else {}
    return {"result": result, "batch_of": batch_of, "outcomes": outcomes}, marks


def _next_watermarks(scenario: dict) -> list[int]:
    """The watermark Spark runs the micro-batch after each at: the next one's (the scenario's
    last micro-batch has no rows: its own; the end's is past every deadline)."""
    marks = [b.watermark for b in scenario["batches"]]
    return [*marks[1:], marks[-1]]


@settings(**_SLOW)
@given(scenario=scenarios())
def test_one_shard_expires_in_the_micro_batch_whose_rows_pass_the_deadline(tmp_path_factory, scenario):
    """One shard sees every row: an operation expires in the micro-batch whose rows bring a
    watermark at its deadline (or whose own watermark is there), not the next."""
    got, marks = _stream(scenario, 1, str(tmp_path_factory.mktemp("state")))
    assert_same(got["result"], reference_with_wakes(scenario, 1))
    _assert_none_early(got, scenario)
    _assert_in_time(got, scenario, marks, lambda op_id: True)


@settings(**_SLOW)
@given(scenario=scenarios())
def test_three_shards_give_the_reference_outcomes_neither_early_nor_late(tmp_path_factory, scenario):
    """Three shards, each moving to what its own rows bring, and the cross-shard group: stubs,
    relays, parked operations and their registries' verdicts as on Spark give the reference's
    results, and no expiry comes before the watermark Spark runs the next micro-batch at.
    Each shard also sees the marks (both inputs' largest event times over the whole
    micro-batch, ``spark.input_stream``): an operation of one shard expires in the
    micro-batch whose rows, in any shard, bring a watermark at its deadline.  Not counted
    there: an operation across shards (it lives in the cross-shard group, which moves a call
    after its relays) and one parked for its op_id registry's verdict (registered a call
    later)."""
    assume(not _registry_limit(scenario["ops"], 3))
    got, marks = _stream(scenario, 3, str(tmp_path_factory.mktemp("state")))
    assert_same(got["result"], reference_with_wakes(scenario, 3))
    _assert_none_early(got, scenario)
    homes = {o["op_id"]: home_of(o, 3) for b in scenario["batches"] for o in b.ops if not o.get("_reason")}

    def counted(op_id: str) -> bool:
        return homes[op_id] < 3 and registry_of(op_id, 3) == homes[op_id]

    _assert_in_time(got, scenario, marks, counted)


def _assert_in_time(got: dict, scenario: dict, marks: list[int], counted) -> None:
    """Every expired operation ``counted`` (by op_id) expired no later than the micro-batch whose
    rows brought a watermark at its deadline (or whose own watermark was there), or the one it
    arrived in."""
    delays = scenario["delays"]
    brought = []  # each micro-batch's watermark once its rows are admitted
    for b, wm in zip(scenario["batches"], marks, strict=True):
        latest = [
            max((r["ts"] for r in rows if not r.get("_reason")), default=None) for rows in (b.ops, b.events)
        ]
        inside = None if None in latest else min(t - d for t, d in zip(latest, delays, strict=True))
        brought.append(max(wm, inside) if inside is not None else wm)
    outcomes = got["outcomes"]
    for o in outcomes.loc[outcomes["status"] == "expired"].itertuples():
        due = next((n for n, w in enumerate(brought) if w >= o.deadline), None)
        if due is not None and counted(o.op_id):
            arrived = _arrival(scenario, o.op_id)
            assert o.batch <= max(due, arrived), (o.op_id, o.deadline, o.batch, brought)


def _assert_none_early(got: dict, scenario: dict) -> None:
    """No expiry before the watermark Spark runs the next micro-batch at passes its deadline."""
    after = _next_watermarks(scenario)
    outcomes = got["outcomes"]
    for o in outcomes.loc[outcomes["status"] == "expired"].itertuples():
        assert o.deadline <= after[o.batch], (o.op_id, o.deadline, o.batch, after)


def _arrival(scenario: dict, op_id: str) -> int:
    """The micro-batch the admitted operation ``op_id`` arrived in (its first valid copy)."""
    for n, b in enumerate(scenario["batches"]):
        if any(o["op_id"] == op_id and not o.get("_reason") for o in b.ops):
            return n
    raise AssertionError(f"{op_id} never arrived")


def test_an_expiry_comes_in_the_micro_batch_whose_rows_pass_its_deadline(tmp_path):
    """The example: an operation due at 1,000, then rows of both inputs at 5,000 with a 2 s
    delay.  Spark's watermark reaches 3,000 only in the micro-batch after them; the shard
    expires the operation in theirs (a host that moves the watermark by hand, in the next), and
    an event of theirs behind the new watermark is still admitted: it counts for nothing here
    and is reported unmatched, not late."""
    config = PurgatoryConfig(shards=1, watermark_delay="2 seconds")
    micro_batches = [
        ([{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": 1_000}], [{"key": "x", "ts": 0}]),
        (
            [{"op_id": "b", "key": "k", "ts": 5_000, "timeout_ms": 1_000}],
            [{"key": "x", "ts": 5_000}, {"key": "k", "ts": 2_500}],
        ),
    ]
    seen = {}
    none = Purgatory(config).process(None, None, watermark_ms=0)  # a call's empty rows
    for on in (True, False):
        cfg = dataclasses.replace(config, state_path=str(tmp_path / str(on)))
        host = LocalShards(cfg, batch_watermark=on)
        seen[on] = []
        for ops, events in micro_batches:  # Spark's watermark: -2,000 after the first, held at 0
            o, bad_o = validate_operations(pd.DataFrame(ops), max_timeout_ms=60_000)
            e, bad_e = validate_events(pd.DataFrame(events))
            calls = host.run(routed(o, e, pd.concat([bad_o, bad_e], ignore_index=True), cfg), 0)

            def rows(name: str, columns: list[str], calls=calls) -> list:
                frames = [getattr(none, name), *(getattr(c.result, name) for c in calls)]
                return stacked(frames)[columns].values.tolist()

            outcomes = rows("outcomes", ["op_id", "status", "resolved_at"])
            seen[on].append(
                (outcomes, rows("unmatched", ["key", "ts", "reason"]), rows("rejected", ["reason"]))
            )
    assert seen[True] == [
        ([], [], []),
        ([["a", "expired", 1_000]], [["x", 0, "no_operation"], ["k", 2_500, "no_operation"]], []),
    ]
    assert seen[False] == [([], [], []), ([], [], [])]


def test_a_stub_holding_an_event_that_waits_for_a_parked_operation_keeps_its_pairing(tmp_path):
    """Found on Spark's split test (its workload, three shards): a home waiting for its parked
    operations' verdicts keeps its events in the buffer; a stub of a cross-shard operation that
    matched one of them must not expire before the event is final, or the event is reported
    unmatched although the cross-shard operation counted it.  The home moves one call later."""
    from tests.spark.test_split_invariance_spark import CONFIG as SPLIT_CONFIG
    from tests.spark.test_split_invariance_spark import _cut, _workload

    rng = np.random.default_rng(31)
    ops, events = _workload(rng)
    cut = list(zip_longest(_cut(ops, rng, 5), _cut(events, rng, 7), fillvalue=[]))
    delays = (SPLIT_CONFIG.input_delay_ms("operations"), SPLIT_CONFIG.input_delay_ms("events"))
    scenario = {
        "batches": [Batch(o, e, wm) for (o, e), wm in zip(cut, spark_watermarks(cut, delays), strict=True)]
    }
    scenario["batches"].append(Batch([], [], scenario["batches"][-1].watermark))
    scenario.update(delays=delays, end=False, ops=ops)
    got, _ = _stream(scenario, 3, str(tmp_path), config=SPLIT_CONFIG)
    assert_same(got["result"], reference_with_wakes(scenario, 3))
    assert got["result"].unmatched and any(s == "expired" for s, *_ in got["result"].outcomes.values())
