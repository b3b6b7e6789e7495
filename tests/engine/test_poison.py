"""Poison records on the pandas path (``PurgatoryTester``, ``engine.lines``/``validation``):
each limit its own reason, never an exception, at the sizes an attacker would send."""

from __future__ import annotations

import datetime as dt
import json
import re

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_purgatory.config import ConfigError, PurgatoryConfig
from spark_purgatory.contract import STRING_LITERAL
from spark_purgatory.engine.fields import epoch_ms
from spark_purgatory.engine.lines import nested_deeper
from spark_purgatory.testing import PurgatoryTester

_TS = "2026-01-01T00:00:00Z"


def _op(op_id: str, **fields) -> str:
    return json.dumps({"op_id": op_id, "key": "k", "ts": _TS, "timeout_ms": 1000, **fields})


def _reasons(tester: PurgatoryTester) -> dict[str, str]:
    rejected = tester.step().rejected
    return dict(zip(rejected["raw"].str[:20], rejected["reason"], strict=True))


def test_every_poison_record_gets_its_own_reason_at_full_size():
    lines = [
        _op("huge", payload="x" * (20 * 1024 * 1024)),
        '{"op_id": "deep", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}",
        _op("keys", keys=[f"k{i}" for i in range(100_000)]),
        _op("members", condition="all", members=[f"m{i}" for i in range(100_000)]),
        _op("timeout", timeout_ms=10**18),
        _op("year-9999", ts="9999-12-31T23:59:59Z"),
        _op("ok"),
    ]
    t = PurgatoryTester()
    t.add_operations(
        [*lines, b'{"op_id": "utf8", "key": "k\xff", "ts": "2026-01-01T00:00:00Z", "timeout_ms": 1}']
    )
    assert _reasons(t) == {
        line[:20]: reason
        for line, reason in zip(
            lines,
            [
                "record_too_large",
                "too_deep",
                "too_many_keys",
                "too_many_members",
                "timeout_above_max",
                "bad_ts",
            ],
            strict=False,
        )
    }
    assert t.pending == 2  # "ok" and "utf8" (its key read with U+FFFD)


def test_the_limits_are_configuration_keys():
    t = PurgatoryTester(
        {"input.max.keys": 2, "input.max.members": 2, "input.max.depth": 3, "input.max.record.bytes": 200}
    )
    t.add_operations(
        [
            _op("keys", keys=["a", "b", "c"]),
            _op("members", condition="all", members=["a", "b", "c"]),
            _op("deep", target=[[[1]]], condition="sum"),
            _op("big", payload="x" * 200),
            _op("fine", keys=["a", "b"], condition="all", members=["a", "b", "a"]),
        ]
    )
    reasons = sorted(_reasons(t).values())  # each shard reports the rows routed to it
    assert reasons == sorted(["too_many_keys", "too_many_members", "too_deep", "record_too_large"])
    with pytest.raises(ConfigError, match="input.max.depth must be <= 500"):
        PurgatoryConfig.from_mapping({"input.max.depth": "100000"})


def test_a_record_given_as_a_dict_is_bounded_by_its_keys_and_members_too():
    t = PurgatoryTester({"input.max.keys": 1})
    t.add_operations([{"op_id": "a", "keys": ["x", "y"], "ts": 0, "timeout_ms": 1}])
    assert t.step().rejected["reason"].tolist() == ["too_many_keys"]


def test_times_past_2262_are_out_of_range_not_an_overflow():
    values = [
        dt.datetime(9999, 1, 1, tzinfo=dt.timezone.utc),
        dt.datetime(2300, 1, 1),
        pd.Timestamp("2100-01-01", tz="UTC"),
    ]
    ms = epoch_ms(pd.Series(values, dtype=object))
    assert pd.isna(ms[0]) and pd.isna(ms[1]) and ms[2] == 4102444800000
    t = PurgatoryTester()
    t.add_operations([{"op_id": "a", "key": "k", "ts": dt.datetime(9999, 1, 1), "timeout_ms": 1}])
    assert t.step().rejected["reason"].tolist() == ["bad_ts"]
    with pytest.raises(ValueError, match="event time out of range"):
        t.advance_watermark(dt.datetime(9999, 1, 1))


#: the plain form of the contract's possessive ``STRING_LITERAL``: the same matches
_PLAIN = re.compile(r'"(?:[^"\\]|\\[\s\S])*"')


@given(st.text(alphabet='[]{}"\\ ax\n', max_size=60), st.integers(0, 6))
def test_the_depth_is_measured_alike_by_both_patterns(text, depth):
    assert re.sub(STRING_LITERAL, "", text) == _PLAIN.sub("", text)
    brackets = [c for c in re.sub(STRING_LITERAL, "", text) if c in "[]{}"]
    running = deepest = 0
    for c in brackets:
        running += 1 if c in "[{" else -1
        deepest = max(deepest, running)
    assert nested_deeper(text, depth) == (deepest > depth)
