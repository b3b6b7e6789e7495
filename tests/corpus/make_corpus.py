"""Writes the hostile input corpus next to this file (the files are committed; rerun to refresh).

Two micro-batches per stream (``*-1.jsonl`` then ``*-2.jsonl``).  A line is either accepted
(a plain string) or ``rejected(line, reason)``: the reason it must get in ``rejected``.
``expected.json`` lists, per stream, the number of lines, each file's reasons line by line
(null: accepted) and the reasons that must appear in ``rejected``.  The reasons are written
here by hand; only the names allowed are checked against ``contract.REASONS``.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from spark_purgatory.contract import REASONS  # noqa: E402

T = "2026-01-01T00:00:{:02d}.000Z"


def rejected(line: str, reason: str) -> tuple[str, str]:
    if reason not in REASONS:
        raise ValueError(f"{reason!r} is not a rejection reason (contract.REASONS)")
    return line, reason


def op(op_id, ts=1, timeout=5000, **extra):
    row = {"op_id": op_id, "keys": [f"k-{op_id}"], "ts": T.format(ts), "timeout_ms": timeout}
    row.update(extra)
    return json.dumps(row)


def ev(key, ts=2, **extra):
    return json.dumps({"key": key, "ts": T.format(ts), **extra})


OPS_1 = [
    op("ok-1"),  # completes
    op("ok-2", condition="count", target=2),  # completes (2 sources)
    op("ok-3", condition="sum", target=10),  # expires (sum 4)
    op("big-payload", payload="x" * 300_000),  # oversized, carried unchanged
    op("dup-1"),
    rejected(op("dup-1"), "duplicate_op_id"),  # duplicate within the batch
    rejected('{"op_id": "trunc", "keys": ["k"], "ts": ', "malformed_json"),  # truncated JSON
    rejected("not json at all", "malformed_json"),
    rejected("", "malformed_json"),  # empty line
    rejected(
        json.dumps(
            {
                "op_id": None,
                "keys": None,
                "ts": None,
                "timeout_ms": None,
                "condition": None,
                "target": None,
                "members": None,
                "payload": None,
            }
        ),
        "missing_op_id",
    ),  # nulls in every field
    rejected(json.dumps({"op_id": "no-key", "ts": T.format(1), "timeout_ms": 5}), "missing_key"),
    rejected(
        json.dumps({"op_id": "obj-key", "keys": {"a": 1}, "ts": T.format(1), "timeout_ms": 5}), "missing_key"
    ),  # wrong type
    rejected(json.dumps({"op_id": "bool-ts", "keys": ["k"], "ts": True, "timeout_ms": 5}), "bad_ts"),
    rejected(json.dumps({"op_id": "word-ts", "keys": ["k"], "ts": "yesterday", "timeout_ms": 5}), "bad_ts"),
    rejected(json.dumps({"op_id": "no-ts", "keys": ["k"], "timeout_ms": 5}), "missing_ts"),
    rejected(json.dumps({"op_id": "no-timeout", "keys": ["k"], "ts": T.format(1)}), "missing_timeout_ms"),
    rejected(op("word-timeout", timeout="soon"), "bad_timeout_ms"),
    rejected(op("neg-timeout", timeout=-1), "negative_timeout"),
    rejected(op("huge-timeout", timeout=10**15), "timeout_above_max"),
    rejected(op("float-timeout", timeout=1e30), "bad_timeout_ms"),
    rejected(op("weird-cond", condition="most"), "unknown_condition"),
    rejected(op("no-target", condition="count"), "missing_target"),
    rejected(op("nan-target", condition="sum", target="NaN"), "bad_target"),
    rejected(op("no-members", condition="all"), "missing_members"),
    op("quorum-1", condition="quorum", target=2, members=["ann", "bo", "cy"]),  # ann and bo; not mallory
    rejected(op("quorum-no-members", condition="quorum", target=2), "missing_members"),
    rejected(
        op("quorum-of-one", condition="quorum", target=2, members=["ann", "ann"]), "target_above_members"
    ),
    # a field the condition does not use: rejected, never ignored
    rejected(op("any-target", target=3), "unused_target"),
    rejected(op("all-target", condition="all", members=["ann"], target=2), "unused_target"),
    rejected(op("count-members", condition="count", target=2, members=["ann", "bo"]), "unused_members"),
    rejected(
        json.dumps({"op_id": "ancient", "keys": ["k"], "ts": "1969-12-31T23:59:59Z", "timeout_ms": 5}),
        "bad_ts",
    ),
    rejected(
        json.dumps({"op_id": "far-future", "keys": ["k"], "ts": "2300-01-01T00:00:00Z", "timeout_ms": 5}),
        "bad_ts",
    ),
    rejected(
        json.dumps({"op_id": "future", "keys": ["k"], "ts": "2199-01-01T00:00:00Z", "timeout_ms": 5}),
        "ts_in_future",
    ),
    json.dumps({"op_id": 42, "keys": ["k-42"], "ts": T.format(1), "timeout_ms": 1000}),  # number id: its text
    rejected(json.dumps({"op_id": ["x"], "keys": ["k"], "ts": T.format(1), "timeout_ms": 5}), "bad_op_id"),
    rejected(op("obj-payload", payload={"a": 1}), "bad_payload"),
    rejected(op("inf-target", condition="sum", target="Infinity"), "bad_target"),
    rejected(
        json.dumps(
            {"op_id": "blank-keys", "keys": ["", " "], "key": "k", "ts": T.format(1), "timeout_ms": 5}
        ),
        "missing_key",
    ),  # `keys` given: `key` does not stand in
    # epoch ms, one `key`, the timeout as text: accepted (expires)
    json.dumps({"op_id": "ms-ts", "key": "k-ms-ts", "ts": 1_767_225_601_000, "timeout_ms": "5000"}),
    rejected(op("num-payload", payload=12), "bad_payload"),  # a payload is a string or nothing
    op("text-payload", ts=2, payload="12"),  # digits as text: carried (expires); moves the ops watermark
]
OPS_2 = [
    rejected(op("ok-1", ts=20), "duplicate_op_id"),  # duplicate across batches
    rejected(op("late", ts=0), "late"),  # behind the watermark (both inputs reached 2 s: 1 s)
]
EVENTS_1 = [
    ev("k-ok-1", 2),
    ev("k-ok-2", 2, source="a", op_id="ok-2"),
    ev("k-ok-2", 3, source="b", op_id="ok-2"),
    ev("k-ok-3", 2, value=4),
    ev("k-quorum-1", 2, source="ann"),
    ev("k-quorum-1", 3, source="mallory"),  # no member: matched, never counted towards the 2
    ev("k-quorum-1", 3, source="bo"),  # the second member: completes quorum-1
    ev("k-big-payload", 3),
    ev("nobody", 2),  # unknown key -> unmatched
    ev("k-ok-1", 3, op_id="ghost"),  # unknown target -> unmatched
    rejected('{"key": "k", "ts": ', "malformed_json"),  # truncated
    rejected(json.dumps({"key": None, "ts": T.format(2)}), "missing_key"),
    rejected(json.dumps({"key": "k", "ts": None}), "missing_ts"),
    rejected(json.dumps({"key": "k", "ts": T.format(2), "value": "lots"}), "bad_value"),
    json.dumps({"key": 7, "ts": T.format(2)}),  # number key: accepted, unmatched
    rejected(ev("nobody", 2, source=["a"]), "bad_source"),
    rejected(ev("nobody", 2, source=7), "bad_source"),  # a source is a name: a string
    rejected(ev("nobody", 2, op_id={"x": 1}), "bad_op_id"),
    rejected(json.dumps({"key": "k", "ts": T.format(2), "value": "Infinity"}), "bad_value"),
    json.dumps({"key": "nobody", "ts": 1_767_225_602_000}),  # epoch ms: accepted, unmatched
]
EVENTS_2 = [
    ev("k-ok-1", 4),  # after ok-1 resolved
    rejected(ev("k-ok-1", 0), "late"),
    rejected(json.dumps({"key": "k", "ts": "2150-01-01T00:00:00Z"}), "ts_in_future"),  # too far ahead
    ev("pad", 50),  # moves the watermark on
]
# not UTF-8: the first is read with replacement characters, the second is garbage
RAW_EVENT_BYTES = [
    b'{"key": "caf\xe9-\xff\xfe", "ts": "2026-01-01T00:00:02.000Z"}',
    (b"\xff\xfe\x00garbage", "malformed_json"),
]
FILES = {"ops-1": OPS_1, "ops-2": OPS_2, "events-1": [*EVENTS_1, *RAW_EVENT_BYTES], "events-2": EVENTS_2}


def _line(entry) -> bytes:
    line = entry[0] if isinstance(entry, tuple) else entry
    return line if isinstance(line, bytes) else line.encode()


def _reason(entry) -> str | None:
    return entry[1] if isinstance(entry, tuple) else None


REASONS_BY_FILE = {name: [_reason(e) for e in entries] for name, entries in FILES.items()}
EXPECTED = {
    "operations": {"lines": len(OPS_1) + len(OPS_2)},
    "events": {"lines": len(EVENTS_1) + len(EVENTS_2) + len(RAW_EVENT_BYTES)},
    "rejected_reasons": sorted({r for reasons in REASONS_BY_FILE.values() for r in reasons if r}),
    "reasons": REASONS_BY_FILE,
}


def main() -> None:
    for name, entries in FILES.items():
        with open(os.path.join(HERE, f"{name}.jsonl"), "wb") as f:
            f.write(b"".join(_line(e) + b"\n" for e in entries))
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(EXPECTED, f, indent=1)


if __name__ == "__main__":
    main()
