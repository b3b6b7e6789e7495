"""Poison records through a running stream: rejected with their own reasons, never fatal.

One ``available-now`` run over files holding, beside valid operations and events, a 2 MB
value (above ``input.max.record.bytes``; a 20 MB one goes through both checking paths on its
own, as a stream's text costs its micro-batch time in every projection that carries it),
JSON nested 100,000 deep, 100,000 keys, 100,000 members, a timeout of 10^18 ms, year
9999 and invalid UTF-8: the stream finishes, the valid operations complete, each poison record
is in ``rejected`` with its reason, and the huge one's ``raw`` is its start and its size.
Both checking paths give the same reasons on small records (``test_vocabulary.py``); a Kafka
tombstone and a deep Kafka value: ``test_kafka.py``.  The driver's peak memory is printed
(``-s``), not asserted.
"""

from __future__ import annotations

import json
import os
import resource

import pytest

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.spark.sources import parse_operations
from spark_purgatory.testing import PurgatoryTester
from tests.support.stream_helpers import Files, replicas_warning, run_stream

pytestmark = pytest.mark.spark

_TS = "2026-01-01T00:00:{:02d}Z"


def _op(op_id: str, **fields) -> str:
    return json.dumps({"op_id": op_id, "key": op_id, "ts": _TS.format(0), "timeout_ms": 60_000, **fields})


POISON = {
    "huge": (_op("huge", payload="x" * (2 * 1024 * 1024)), "record_too_large"),
    "deep": ('{"op_id": "deep", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}", "too_deep"),
    "keys": (_op("keys", keys=[f"k{i}" for i in range(100_000)]), "too_many_keys"),
    "members": (
        _op("members", condition="all", members=[f"m{i}" for i in range(100_000)]),
        "too_many_members",
    ),
    "timeout": (_op("timeout", timeout_ms=10**18), "timeout_above_max"),
    "year-9999": (_op("year-9999", ts="9999-12-31T23:59:59Z"), "bad_ts"),
}


def test_poison_records_are_rejected_with_their_reasons_and_the_stream_carries_on(spark, tmp_path):
    files = Files(str(tmp_path))
    valid = [_op(f"ok-{i}") for i in range(3)]
    utf8 = '{"op_id": "utf8", "key": "k\udcff", "ts": "2026-01-01T00:00:00Z", "timeout_ms": 60000}'
    files.add([valid[0], *(line for line, _ in POISON.values())], [])
    first = os.path.join(files.ops, "part-0000.json")
    stamp = os.stat(first).st_mtime  # the file's place in the stream's order, kept
    with open(first, "ab") as f:  # invalid UTF-8: read as U+FFFD
        f.write(utf8.encode("utf-8", "surrogateescape") + b"\n")
    os.utime(first, (stamp, stamp))
    events = [json.dumps({"key": f"ok-{i}", "ts": _TS.format(i + 1)}) for i in range(3)]
    pad = json.dumps({"key": "pad", "ts": _TS.format(59)})  # moves the watermark
    files.add(valid[1:], [*events, pad])

    with replicas_warning():
        run = run_stream(spark, files, PurgatoryConfig(shards=2, watermark_delay="1 second"))

    reasons = dict(zip(run.rejected["op_id"].fillna(""), run.rejected["reason"], strict=True))
    by_reason = {reason: raw for raw, reason in zip(run.rejected["raw"], run.rejected["reason"], strict=True)}
    assert set(by_reason) == {reason for _, reason in POISON.values()}
    assert {op: reasons[op] for op in ("keys", "members", "timeout", "year-9999")} == {
        op: POISON[op][1] for op in ("keys", "members", "timeout", "year-9999")
    }
    huge = by_reason["record_too_large"]
    assert huge.startswith('{"op_id": "huge"') and huge.endswith(
        f"…[truncated: {len(POISON['huge'][0])} bytes]"
    )
    assert len(huge) < 2000
    done = run.outcomes.set_index("op_id")["status"].to_dict()
    assert {op: done.get(op) for op in ("ok-0", "ok-1", "ok-2")} == dict.fromkeys(
        ("ok-0", "ok-1", "ok-2"), "completed"
    )
    assert "utf8" not in reasons  # accepted (pending: no event), its key read with U+FFFD
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"driver (pytest + its JVM client) peak RSS {peak_mb:.0f} MB")


def test_a_20_mb_value_is_cut_to_its_start_and_size_on_both_checking_paths(spark):
    line = _op("huge", payload="x" * (20 * 1024 * 1024))
    cut = line[:1024] + f"…[truncated: {len(line)} bytes]"
    frame = spark.createDataFrame([(line,)], "value string")
    row = parse_operations(frame, "json", max_timeout_ms=PurgatoryConfig().max_timeout_ms).first()
    assert (row.reason, row.raw) == ("record_too_large", cut)
    tester = PurgatoryTester()
    tester.add_operations([line])
    assert tester.step().rejected[["reason", "raw"]].values.tolist() == [["record_too_large", cut]]
