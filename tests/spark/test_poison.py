"""Poison records: rejected with their own reasons, never fatal.

``POISON`` holds a 2 MB value (above ``input.max.record.bytes``), JSON nested 100,000 deep,
100,000 keys, 100,000 members, a timeout of 10^18 ms and year 9999, each with the reason it
must get.  They go through a running stream beside the hostile input corpus, with invalid
UTF-8 and valid operations (``test_hostile_input.py``: one ``available-now`` run for both);
a 20 MB value goes through both checking paths here, on its own, as a stream's text costs its
micro-batch time in every projection that carries it.  Both checking paths give the same
reasons on small records (``test_vocabulary.py``); a Kafka tombstone and a deep Kafka value:
``test_kafka.py``.
"""

from __future__ import annotations

import json

import pytest

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.spark.sources import parse_operations
from spark_purgatory.testing import PurgatoryTester

pytestmark = pytest.mark.spark

_TS = "2026-01-01T00:00:{:02d}Z"


def op_line(op_id: str, **fields) -> str:
    """An operation of one key (its op_id) at 00:00, a minute's timeout; ``fields`` override."""
    return json.dumps({"op_id": op_id, "key": op_id, "ts": _TS.format(0), "timeout_ms": 60_000, **fields})


POISON = {
    "huge": (op_line("huge", payload="x" * (2 * 1024 * 1024)), "record_too_large"),
    "deep": ('{"op_id": "deep", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}", "too_deep"),
    "keys": (op_line("keys", keys=[f"k{i}" for i in range(100_000)]), "too_many_keys"),
    "members": (
        op_line("members", condition="all", members=[f"m{i}" for i in range(100_000)]),
        "too_many_members",
    ),
    "timeout": (op_line("timeout", timeout_ms=10**18), "timeout_above_max"),
    "year-9999": (op_line("year-9999", ts="9999-12-31T23:59:59Z"), "bad_ts"),
}


def test_a_20_mb_value_is_cut_to_its_start_and_size_on_both_checking_paths(spark):
    line = op_line("huge", payload="x" * (20 * 1024 * 1024))
    cut = line[:1024] + f"…[truncated: {len(line)} bytes]"
    frame = spark.createDataFrame([(line,)], "value string")
    row = parse_operations(frame, "json", max_timeout_ms=PurgatoryConfig().max_timeout_ms).first()
    assert (row.reason, row.raw) == ("record_too_large", cut)
    tester = PurgatoryTester()
    tester.add_operations([line])
    assert tester.step().rejected[["reason", "raw"]].values.tolist() == [["record_too_large", cut]]
