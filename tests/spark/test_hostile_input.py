"""The hostile input corpus (tests/corpus) and the poison records: the stream never stops and
loses nothing.

One ``available-now`` run over the corpus's two files per stream, its first operations file
carrying the poison records of ``test_poison`` too (a 2 MB value, JSON nested 100,000 deep,
100,000 keys, 100,000 members, a timeout of 10^18 ms, year 9999, invalid UTF-8) and three
valid operations whose events ride in the first events file.  Every operation line ends in
``outcomes`` or ``rejected``; every event line in ``rejected``, ``unmatched_events``, or
counted by an outcome (each valid event here matches at most one operation), except the last
padding event, still waiting for the watermark to pass it.  Each poison record is in
``rejected`` with its own reason, the huge one's ``raw`` is its start and its size, and the
valid operations beside them complete.  The driver's peak memory is printed (``-s``), not
asserted.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import time

import pytest

from spark_purgatory.config import PurgatoryConfig
from tests.spark.test_poison import POISON, op_line
from tests.support.stream_helpers import Files, replicas_warning, run_stream

pytestmark = pytest.mark.spark
CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpus")

#: valid operations among the poison records, each completed by an event of its key
FINE = [op_line(f"fine-{i}") for i in range(3)]
FINE_EVENTS = [json.dumps({"key": f"fine-{i}", "ts": f"2026-01-01T00:00:0{i + 1}Z"}) for i in range(3)]
#: invalid UTF-8 in a key: read as U+FFFD, accepted; expires at 00:01, before the watermark
UTF8 = '{"op_id": "utf8", "key": "k\udcff", "ts": "2026-01-01T00:00:00Z", "timeout_ms": 1000}'


def test_hostile_corpus_and_poison_records_are_fully_accounted_for(spark, tmp_path):
    files = Files(str(tmp_path))
    stamp = time.time() - 100
    poison = {"ops": [*FINE, *(line for line, _ in POISON.values())], "events": FINE_EVENTS}
    for index, (ops, events) in enumerate((("ops-1", "events-1"), ("ops-2", "events-2"))):
        for kind, name, directory in (("ops", ops, files.ops), ("events", events, files.events)):
            target = os.path.join(directory, f"part-{index:04d}.json")
            shutil.copy(os.path.join(CORPUS, f"{name}.jsonl"), target)
            if index == 0:  # the poison records ride in the first micro-batch
                with open(target, "ab") as f:
                    f.write("".join(line + "\n" for line in poison[kind]).encode("utf-8"))
                    if kind == "ops":
                        f.write(UTF8.encode("utf-8", "surrogateescape") + b"\n")
            os.utime(target, (stamp + index, stamp + index))
    with open(os.path.join(CORPUS, "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)

    with replicas_warning():
        run = run_stream(spark, files, PurgatoryConfig(shards=2, watermark_delay="1 second"))

    rejected_ops = run.rejected[run.rejected["source"] == "operations"]
    rejected_events = run.rejected[run.rejected["source"] == "events"]
    op_lines = expected["operations"]["lines"] + len(poison["ops"]) + 1  # the invalid UTF-8 line
    assert len(run.outcomes) + len(rejected_ops) == op_lines
    assert run.outcomes["op_id"].is_unique
    counted = int(run.outcomes["matched_events"].sum())
    still_buffered = 1  # the padding event that moved the watermark on
    event_lines = expected["events"]["lines"] + len(poison["events"])
    assert len(rejected_events) + len(run.unmatched) + counted + still_buffered == event_lines
    assert set(expected["rejected_reasons"]) <= set(run.rejected["reason"])
    line_reasons = [r for reasons in expected["reasons"].values() for r in reasons if r]
    line_reasons += [reason for _, reason in POISON.values()]
    assert sorted(run.rejected["reason"]) == sorted(line_reasons)  # each line its own reason
    assert run.rejected["raw"].notna().all()

    big = run.outcomes[run.outcomes["op_id"] == "big-payload"].iloc[0]
    assert len(big["payload"]) == 300_000  # carried unchanged
    reasons = dict(zip(run.unmatched["key"], run.unmatched["reason"], strict=False))
    assert reasons["nobody"] == "no_operation"
    assert set(run.unmatched["reason"]) <= {"no_operation", "after_resolution"}

    # the poison records: each rejected with its reason, the huge one's raw cut
    by_op = dict(zip(run.rejected["op_id"].fillna(""), run.rejected["reason"], strict=True))
    named = ("keys", "members", "timeout", "year-9999")
    assert {op: by_op[op] for op in named} == {op: POISON[op][1] for op in named}
    (huge,) = run.rejected.loc[run.rejected["reason"] == "record_too_large", "raw"]
    assert huge.startswith('{"op_id": "huge"') and huge.endswith(
        f"…[truncated: {len(POISON['huge'][0])} bytes]"
    )
    assert len(huge) < 2000
    (deep,) = run.rejected.loc[run.rejected["reason"] == "too_deep", "raw"]
    assert deep.startswith('{"op_id": "deep"')
    done = run.outcomes.set_index("op_id")
    assert done.loc[[f"fine-{i}" for i in range(3)], "status"].tolist() == ["completed"] * 3
    assert "utf8" not in by_op  # accepted, its key read with U+FFFD
    assert (done.loc["utf8", "status"], list(done.loc["utf8", "keys"])) == ("expired", ["k\ufffd"])
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"driver (pytest + its JVM client) peak RSS {peak_mb:.0f} MB")
