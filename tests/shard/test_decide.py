"""``shard.step.decide``, case by case: what a shard keeps after its call, the watermark its
output reports and the event-time timeout it sets (Spark fires it once its watermark is past).

Each row is a shard's situation after the engine's call -> (kept?, reported watermark,
timeout).  ``ShardStep`` decides through it after every call and ``rescale`` for every shard
it writes, so the two keep the same shards.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.engine.purgatory import Purgatory
from spark_purgatory.handoff.end_of_input import end_watermark_ms
from spark_purgatory.handoff.shard_handoff import ShardHandOff
from spark_purgatory.shard.step import Decision, ShardStep, decide

SHARDS = 2
CROSS = SHARDS  # the cross-shard group's number
WM = 2_000  # Spark's watermark in every row
END = end_watermark_ms(60_000, PurgatoryConfig().tick_ms)


def _config(**settings) -> PurgatoryConfig:
    return PurgatoryConfig(shards=SHARDS, max_timeout_ms=60_000, state_path="/nowhere", **settings)


def _empty(at: int = WM) -> Callable[[PurgatoryConfig], Purgatory]:
    """A shard holding nothing whose engine ran at watermark ``at``."""
    return lambda config: Purgatory(config, start_ms=at)


def _pending(at: int = WM, deadline: int = 8_000) -> Callable[[PurgatoryConfig], Purgatory]:
    """A shard holding one ``any`` operation due at ``deadline``, its engine at ``at``."""

    def build(config: PurgatoryConfig) -> Purgatory:
        p = Purgatory(config)
        ops = pd.DataFrame({"op_id": ["o"], "keys": [["k"]], "ts": [at], "timeout_ms": [deadline - at]})
        p.process(ops, None, watermark_ms=at)
        assert p.pending == 1
        return p

    return build


def _buffered(ts: int = 3_000) -> Callable[[PurgatoryConfig], Purgatory]:
    """A shard holding one event at ``ts`` that nothing matched yet."""

    def build(config: PurgatoryConfig) -> Purgatory:
        p = Purgatory(config)
        p.process(None, pd.DataFrame({"key": ["k"], "ts": [ts]}), watermark_ms=WM)
        return p

    return build


# fmt: off
# (the shard's situation, shard, its engine, Spark's watermark held back to, the mailbox on)
#   -> (kept, the watermark its output reports, its timeout)
CASES = [
    ("empty primary",                     0,     _empty(),         WM,    True,  False, WM,    None),
    ("ended empty primary",               0,     _empty(END),      WM,    True,  True,  END,   None),
    ("clocked empty primary",             0,     _empty(5_000),    WM,    True,  True,  5_000, None),
    ("primary, an operation pending",     0,     _pending(),       WM,    True,  True,  WM,    7_999),
    ("primary, an event buffered",        0,     _buffered(),      WM,    True,  True,  WM,    3_000),
    ("Kafka-held primary, pending",       0,     _pending(1_500),  1_500, True,  True,  1_500, 7_999),
    ("Kafka-held empty primary",          0,     _empty(1_500),    1_500, True,  False, 1_500, None),
    ("cross-shard group, empty",          CROSS, _empty(),         WM,    True,  True,  WM,    None),
    ("cross-shard group, no mailbox",     CROSS, _empty(),         WM,    False, False, WM,    None),
    ("cross-shard group awaiting relays", CROSS, _pending(),       WM,    True,  True,  WM,    WM),
    ("cross-shard group, ended",          CROSS, _empty(END),      WM,    True,  True,  END,   None),
]
# fmt: on


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_what_a_shard_keeps(case):
    _, shard, build, held, mailbox, *expected = case
    config = _config(cross_shard_handoff="mailbox" if mailbox else "replicas")
    assert decide(build(config), shard, WM, held, ShardHandOff.of(config)) == Decision(*expected)


def test_the_shard_step_decides_through_it():
    config = _config()
    step = ShardStep(config)
    for _, shard, build, held, mailbox, *expected in CASES:
        if mailbox:
            assert step.decide(build(config), shard, WM, held) == Decision(*expected)
