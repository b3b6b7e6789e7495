"""Writes the hostile input corpus next to this file (the files are committed; rerun to refresh).

Two micro-batches per stream (``*-1.jsonl`` then ``*-2.jsonl``).  ``expected.json`` lists, per
stream, the number of lines and the reasons that must appear in ``rejected``.
"""

from __future__ import annotations

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
T = "2026-01-01T00:00:{:02d}.000Z"


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
    op("dup-1"),  # duplicate within the batch
    '{"op_id": "trunc", "keys": ["k"], "ts": ',  # truncated JSON
    "not json at all",
    "",  # empty line
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
    ),  # nulls in every field
    json.dumps({"op_id": "no-key", "ts": T.format(1), "timeout_ms": 5}),
    json.dumps({"op_id": "obj-key", "keys": {"a": 1}, "ts": T.format(1), "timeout_ms": 5}),  # wrong type
    json.dumps({"op_id": "bool-ts", "keys": ["k"], "ts": True, "timeout_ms": 5}),
    json.dumps({"op_id": "word-ts", "keys": ["k"], "ts": "yesterday", "timeout_ms": 5}),
    json.dumps({"op_id": "no-ts", "keys": ["k"], "timeout_ms": 5}),
    json.dumps({"op_id": "no-timeout", "keys": ["k"], "ts": T.format(1)}),
    op("word-timeout", timeout="soon"),
    op("neg-timeout", timeout=-1),
    op("huge-timeout", timeout=10**15),
    op("float-timeout", timeout=1e30),
    op("weird-cond", condition="most"),
    op("no-target", condition="count"),
    op("nan-target", condition="sum", target="NaN"),
    op("no-members", condition="all"),
    json.dumps({"op_id": "ancient", "keys": ["k"], "ts": "1969-12-31T23:59:59Z", "timeout_ms": 5}),
    json.dumps({"op_id": "far-future", "keys": ["k"], "ts": "2300-01-01T00:00:00Z", "timeout_ms": 5}),
    json.dumps({"op_id": "future", "keys": ["k"], "ts": "2199-01-01T00:00:00Z", "timeout_ms": 5}),
    json.dumps({"op_id": 42, "keys": ["k-42"], "ts": T.format(1), "timeout_ms": 1000}),  # number id: accepted
]
OPS_2 = [
    op("ok-1", ts=20),  # duplicate across batches
    op("late", ts=0),  # behind the watermark
]
EVENTS_1 = [
    ev("k-ok-1", 2),
    ev("k-ok-2", 2, source="a", op_id="ok-2"),
    ev("k-ok-2", 3, source="b", op_id="ok-2"),
    ev("k-ok-3", 2, value=4),
    ev("k-big-payload", 3),
    ev("nobody", 2),  # unknown key -> unmatched
    ev("k-ok-1", 3, op_id="ghost"),  # unknown target -> unmatched
    '{"key": "k", "ts": ',  # truncated
    json.dumps({"key": None, "ts": T.format(2)}),
    json.dumps({"key": "k", "ts": None}),
    json.dumps({"key": "k", "ts": T.format(2), "value": "lots"}),
    json.dumps({"key": 7, "ts": T.format(2)}),  # number key: accepted, unmatched
]
EVENTS_2 = [
    ev("k-ok-1", 4),  # after ok-1 resolved
    ev("k-ok-1", 0),  # late
    json.dumps({"key": "k", "ts": "2150-01-01T00:00:00Z"}),  # too far in the future
    ev("pad", 50),  # moves the watermark on
]
RAW_EVENT_BYTES = [b'{"key": "caf\xe9-\xff\xfe", "ts": "2026-01-01T00:00:02.000Z"}', b"\xff\xfe\x00garbage"]

EXPECTED = {
    "operations": {"lines": len(OPS_1) + len(OPS_2)},
    "events": {"lines": len(EVENTS_1) + len(EVENTS_2) + len(RAW_EVENT_BYTES)},
    "rejected_reasons": sorted(
        {
            "duplicate_op_id",
            "malformed_json",
            "missing_op_id",
            "missing_key",
            "bad_ts",
            "missing_ts",
            "missing_timeout_ms",
            "bad_timeout_ms",
            "negative_timeout",
            "timeout_above_max",
            "unknown_condition",
            "missing_target",
            "bad_target",
            "missing_members",
            "ts_in_future",
            "late",
            "bad_value",
        }
    ),
}


def main() -> None:
    for name, lines in (("ops-1", OPS_1), ("ops-2", OPS_2), ("events-1", EVENTS_1), ("events-2", EVENTS_2)):
        with open(os.path.join(HERE, f"{name}.jsonl"), "wb") as f:
            body = b"".join(line.encode() + b"\n" for line in lines)
            if name == "events-1":
                body += b"".join(raw + b"\n" for raw in RAW_EVENT_BYTES)  # not UTF-8
            f.write(body)
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(EXPECTED, f, indent=1)


if __name__ == "__main__":
    main()
