"""The pandas validator (``engine.validation``): the reason each record gets, the fields of a
valid row as the engine takes them, and the same answer whatever shape the frame comes in.

How a field is read is in ``engine.validation``'s docstring; these tests write it down record
by record (one field changed from a valid operation or event), then check the whole frame:
a typed frame, the same frame as Python objects and each row on its own are validated alike.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.contract import EVENT_REASONS, OPERATION_REASONS, REJECTED_COLUMNS
from spark_purgatory.engine.batch import with_keys
from spark_purgatory.engine.conditions import NEEDS_MEMBERS, NEEDS_TARGET
from spark_purgatory.engine.validation import readable, validate_events, validate_operations

CONFIG = PurgatoryConfig()
CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpus")
TS = "2026-01-01T00:00:00Z"
TS_MS = 1_767_225_600_000
MAX_TIMEOUT_MS = 10**9
_ABSENT = object()
_VALID_TYPES = ["object", "object", "int64", "int64", "int8", "float64", "object", "object", "float64"]
_REJECTED = [c for c in REJECTED_COLUMNS if c != "batch_id"]  # the engine adds batch_id


def _operation(**fields) -> dict:
    record = {"op_id": "a", "keys": ["k"], "ts": 0, "timeout_ms": 5, **fields}
    return {k: v for k, v in record.items() if v is not _ABSENT}


def _event(**fields) -> dict:
    record = {"key": "k", "ts": TS, **fields}
    return {k: v for k, v in record.items() if v is not _ABSENT}


def _one_operation(record: dict) -> str | dict:
    """The reason the record is rejected for, or its valid row."""
    valid, rejected = validate_operations(pd.DataFrame([record]), max_timeout_ms=MAX_TIMEOUT_MS)
    assert len(valid) + len(rejected) == 1
    return rejected["reason"].iloc[0] if len(rejected) else valid.iloc[0].to_dict()


def _one_event(record: dict) -> str | dict:
    valid, rejected = validate_events(pd.DataFrame([record]))
    assert len(valid) + len(rejected) == 1
    return rejected["reason"].iloc[0] if len(rejected) else valid.iloc[0].to_dict()


# -- operations, field by field ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, keys",
    [
        ({"keys": "solo"}, ["solo"]),  # a single string is a one-element list
        ({"keys": '["b","a","a"," "]'}, ["b", "a"]),  # JSON array text: read, cleaned, in order
        ({"keys": ["b", "a", 1, None, " ", "a"]}, ["b", "a", "1"]),  # a number stands for its text
        ({"keys": np.array(["z", "y"], dtype=object)}, ["z", "y"]),
        ({"keys": 5}, ["5"]),
        ({"keys": True}, ["true"]),
        ({"keys": _ABSENT, "key": " k2 "}, [" k2 "]),  # `key` stands for `keys`, kept as it is
        ({"keys": None, "key": 5}, ["5"]),
    ],
)
def test_an_operations_keys_are_read_as_a_clean_list(fields, keys):
    assert _one_operation(_operation(**fields))["keys"] == keys


@pytest.mark.parametrize(
    "fields",
    [
        {"keys": "[broken"},
        {"keys": {"x": 1}},
        {"keys": []},
        {"keys": [], "key": "k"},  # an empty list is a list: `key` does not stand in
        {"keys": {"x": 1}, "key": "k"},  # an object is no list, but `key` does not stand in either
        {"keys": [" ", None, ""]},
        {"keys": None, "key": " "},
    ],
)
def test_an_operation_without_a_readable_key_is_missing_key(fields):
    record = _operation(**fields)
    if fields == {"keys": {"x": 1}, "key": "k"}:
        assert _one_operation(record)["keys"] == ["k"]
    else:
        assert _one_operation(record) == "missing_key"


@pytest.mark.parametrize(
    "op_id, expected",
    [(True, "true"), (5, "5"), (5.0, "5.0"), (1e20, "1e+20"), (math.inf, "Infinity"), ("o ", "o ")],
)
def test_an_op_id_that_is_a_number_or_boolean_stands_for_its_text(op_id, expected):
    assert _one_operation(_operation(op_id=op_id))["op_id"] == expected


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"op_id": " "}, "missing_op_id"),
        ({"op_id": math.nan}, "missing_op_id"),
        ({"op_id": {}}, "bad_op_id"),
        ({"op_id": [1]}, "bad_op_id"),
        ({"ts": -5}, "bad_ts"),
        ({"ts": ""}, "missing_ts"),
        ({"ts": [1]}, "bad_ts"),
        ({"ts": 5.5}, "bad_ts"),  # a float ts that is not whole is no epoch ms (not missing)
        ({"ts": True}, "bad_ts"),
        ({"ts": 7_258_118_400_000}, "bad_ts"),  # 2200: outside the range
        ({"ts": "2026-13-01"}, "bad_ts"),
        ({"timeout_ms": "5.0"}, "bad_timeout_ms"),  # text must be whole digits ...
        ({"timeout_ms": 5.5}, "bad_timeout_ms"),
        ({"timeout_ms": True}, "bad_timeout_ms"),
        ({"timeout_ms": 2**64}, "bad_timeout_ms"),
        ({"timeout_ms": "１２"}, "bad_timeout_ms"),  # full-width digits are not digits here
        ({"timeout_ms": ""}, "missing_timeout_ms"),
        ({"timeout_ms": math.nan}, "missing_timeout_ms"),
        ({"timeout_ms": -1}, "negative_timeout"),
        ({"timeout_ms": MAX_TIMEOUT_MS + 1}, "timeout_above_max"),
        ({"condition": "Any\t"}, "unknown_condition"),  # only spaces are stripped
        ({"condition": ""}, "unknown_condition"),
        ({"condition": 5}, "unknown_condition"),
        ({"condition": True}, "unknown_condition"),
        ({"condition": "sum"}, "missing_target"),
        ({"condition": "sum", "target": " "}, "missing_target"),
        ({"condition": "sum", "target": True}, "bad_target"),
        ({"condition": "count", "target": "1_000"}, "bad_target"),
        ({"condition": "offset", "target": math.inf}, "bad_target"),
        ({"condition": "all"}, "missing_members"),
        ({"condition": "all", "members": [" ", None]}, "missing_members"),
        ({"condition": "quorum", "members": ["m"]}, "missing_target"),
        ({"condition": "quorum", "target": 1}, "missing_members"),
        ({"condition": "quorum", "target": 2, "members": ["m", "m", " "]}, "target_above_members"),
        ({"condition": "quorum", "target": math.inf, "members": ["m"]}, "bad_target"),
        # a field the condition does not use: rejected, never ignored
        ({"target": 2}, "unused_target"),
        ({"condition": "all", "members": ["m"], "target": 2}, "unused_target"),
        ({"target": "soon"}, "unused_target"),  # given, though no number
        ({"target": math.inf}, "unused_target"),
        ({"members": ["m"]}, "unused_members"),
        ({"members": "m"}, "unused_members"),  # a single string is a one-element list
        ({"condition": "count", "target": 2, "members": ["m1", "m2"]}, "unused_members"),
        ({"condition": "sum", "target": 2, "members": ["m"]}, "unused_members"),
        ({"condition": "offset", "target": 2, "members": ["m"]}, "unused_members"),
        ({"target": 2, "members": ["m"], "payload": 5}, "unused_target"),  # in the contract's order
        ({"payload": [1]}, "bad_payload"),
        ({"payload": {"a": 1}}, "bad_payload"),
        # a no-break space is text, not white space, to Spark's casts (contract.inputs)
        ({"ts": "\u00a05"}, "bad_ts"),
        ({"timeout_ms": "\u00a05\u00a0"}, "bad_timeout_ms"),
    ],
)
def test_an_operation_gets_the_reason_of_its_first_failing_check(fields, reason):
    assert _one_operation(_operation(**fields)) == reason


@pytest.mark.parametrize(
    "fields, ts, deadline",
    [
        ({"ts": "1767225600000"}, TS_MS, TS_MS + 5),  # epoch ms as digits
        ({"ts": " 2026-01-01T00:00:00Z "}, TS_MS, TS_MS + 5),
        ({"ts": "2026-01-01"}, TS_MS, TS_MS + 5),
        ({"ts": "2026-01-01T05:00:00+05:00"}, TS_MS, TS_MS + 5),
        ({"ts": pd.Timestamp(TS)}, TS_MS, TS_MS + 5),
        ({"ts": 5.0}, 5, 10),
        ({"ts": "\x0b5\r"}, 5, 10),  # Java's white space around digits (contract.EPOCH_MS_TEXT)
        ({"timeout_ms": " 5 "}, 0, 5),
        ({"timeout_ms": 5.0}, 0, 5),  # a whole float is a whole number
        ({"timeout_ms": "\x005\x7f"}, 0, 5),  # Spark's cast to BIGINT ignores U+0000-U+0020, U+007F
    ],
)
def test_event_times_and_timeouts_are_read_to_epoch_ms(fields, ts, deadline):
    row = _one_operation(_operation(**fields))
    assert (row["ts"], row["deadline"]) == (ts, deadline)


def test_a_time_without_an_offset_is_utc_whatever_the_rows_before_it_say():
    """pandas parsing a column of ISO times reads one without an offset in the offset of the
    last one before it that had one; each row's time is its own."""
    times = [
        "2026-01-01T05:00:00+05:00",
        "2026-01-01 00:00:00",
        "2026-01-01T00:00:00",
        "2026-01-01T00:00:00Z",
    ]
    frame = pd.DataFrame([_operation(op_id=str(i), ts=t) for i, t in enumerate(times)])
    valid, _ = validate_operations(frame, max_timeout_ms=MAX_TIMEOUT_MS)
    assert valid["ts"].tolist() == [TS_MS] * 4
    events, _ = validate_events(pd.DataFrame([_event(ts=t) for t in times]))
    assert events["ts"].tolist() == [TS_MS] * 4


@pytest.mark.parametrize(
    "condition, code",
    [
        (" COUNT ", 1),
        ("sum", 2),
        ("all", 3),
        ("Offset", 4),
        ("Quorum ", 5),
        (None, 0),
        (math.nan, 0),
        (_ABSENT, 0),
    ],
)
def test_a_condition_is_read_stripped_of_spaces_and_in_lower_case(condition, code):
    fields = {"condition": condition}
    if code in NEEDS_TARGET:  # only the fields the condition uses: another is rejected
        fields["target"] = 1
    if code in NEEDS_MEMBERS:
        fields["members"] = ["m"]
    assert _one_operation(_operation(**fields))["cond"] == code


@pytest.mark.parametrize(
    "fields", [{"target": None}, {"target": " "}, {"members": []}, {"members": [" ", None]}]
)
def test_a_field_without_a_value_is_not_given_to_any_condition(fields):
    """A null or blank target, members all blank: what a condition that needs them finds
    missing is no unused field for one that does not (a typed frame has every column)."""
    assert _one_operation(_operation(**fields))["cond"] == 0


@pytest.mark.parametrize("payload, expected", [(None, None), ("5", "5"), ("p", "p"), (" ", " ")])
def test_a_payload_is_carried_as_text(payload, expected):
    assert _one_operation(_operation(payload=payload))["payload"] == expected


@pytest.mark.parametrize("payload", [5, 5.0, True, [1], {"a": 1}])
def test_a_payload_that_is_no_string_is_bad_payload(payload):
    """docs/contract.md: the payload is a string, carried unchanged; a number is not turned
    into its text."""
    assert _one_operation(_operation(payload=payload)) == "bad_payload"


def test_a_valid_operation_comes_back_as_the_engine_takes_it():
    record = _operation(
        keys=["b", "a"],
        ts=10,
        timeout_ms=7,
        condition="quorum",
        members=["m2", " ", "m1", "m2"],
        payload="p",
        target=2,
    )
    valid, rejected = validate_operations(pd.DataFrame([record]), max_timeout_ms=MAX_TIMEOUT_MS)
    assert len(rejected) == 0
    assert valid.drop(columns="warn_at").to_dict(orient="list") == {
        "op_id": ["a"],
        "keys": [["b", "a"]],  # in their order
        "ts": [10],
        "deadline": [17],
        "cond": [5],
        "target": [2.0],
        "members": [["m1", "m2"]],
        "payload": ["p"],
    }
    assert np.isnan(valid["warn_at"][0])  # no warning asked
    assert [str(t) for t in valid.dtypes] == _VALID_TYPES
    assert all(type(k) is list for k in [*valid["keys"], *valid["members"]])


def test_no_members_is_an_empty_list_for_every_valid_row():
    valid, _ = validate_operations(pd.DataFrame([_operation(), _operation(op_id="b")]), max_timeout_ms=10)
    assert valid["members"].tolist() == [[], []]
    assert valid["members"].iloc[0] is not valid["members"].iloc[1]  # not one list shared


def test_empty_frames_give_empty_frames_with_the_columns_and_types():
    valid, rejected = validate_operations(pd.DataFrame(), max_timeout_ms=10)
    assert [str(t) for t in valid.dtypes] == _VALID_TYPES
    assert rejected.columns.tolist() == _REJECTED and len(rejected) == 0
    valid, rejected = validate_events(pd.DataFrame())
    assert valid.dtypes.astype(str).to_dict() == {
        "key": "object", "ts": "int64", "op_id": "object", "source": "object", "value": "float64",
        "cancel": "bool",
    }  # fmt: skip
    assert rejected.columns.tolist() == _REJECTED


def test_rejected_operations_keep_the_record_and_carry_op_id_and_key():
    ops = pd.DataFrame(
        [
            _operation(op_id="o", keys=[], key="k", ts=0, timeout_ms=1),
            _operation(op_id="p", keys=None, key=" k2 ", ts=0, timeout_ms=1),
            _operation(op_id=[1], keys=["z", "y"], ts=0, timeout_ms=-1),
        ]
    )
    valid, rejected = validate_operations(ops, max_timeout_ms=10)
    assert valid["op_id"].tolist() == ["p"]
    assert rejected[["reason", "op_id", "key"]].values.tolist() == [
        ["missing_key", "o", None],
        ["bad_op_id", None, "z"],  # the first of its keys
    ]
    assert json.loads(rejected["raw"].iloc[0]) == {
        "key": "k",
        "keys": [],
        "op_id": "o",
        "timeout_ms": 1,
        "ts": 0,
    }


def test_the_raw_text_is_kept_when_the_source_gave_it():
    ops = pd.DataFrame([{**_operation(), "raw": "line 1"}, {**_operation(ts=-1), "raw": "line 2"}])
    valid, rejected = validate_operations(ops, max_timeout_ms=10)
    assert (valid["raw"].tolist(), rejected["raw"].tolist()) == (["line 1"], ["line 2"])
    events = pd.DataFrame([{**_event(), "raw": "e1"}, {**_event(key=" "), "raw": "e2"}])
    valid, rejected = validate_events(events)
    assert (valid["raw"].tolist(), rejected["raw"].tolist()) == (["e1"], ["e2"])


# -- events, field by field -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"value": ""}, "bad_value"),  # given, but no number
        ({"value": True}, "bad_value"),
        ({"value": "-Infinity"}, "bad_value"),
        ({"value": "1_000"}, "bad_value"),
        ({"value": math.inf}, "bad_value"),
        ({"key": "  "}, "missing_key"),
        ({"key": None}, "missing_key"),
        ({"source": {"a": 1}}, "bad_source"),
        ({"source": [1]}, "bad_source"),
        ({"op_id": [1]}, "bad_op_id"),
        ({"ts": "2026-13-01"}, "bad_ts"),
        ({"ts": None}, "missing_ts"),
        ({"ts": ""}, "missing_ts"),
        ({"ts": 7_258_118_400_000}, "bad_ts"),
    ],
)
def test_an_event_gets_the_reason_of_its_first_failing_check(fields, reason):
    assert _one_event(_event(**fields)) == reason


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"value": "12"}, {"value": 12.0}),
        ({"value": " 2.5 "}, {"value": 2.5}),
        ({"value": None}, {"value": math.nan}),
        ({"key": ["k"]}, {"key": '["k"]'}),  # an array in a text field is its JSON text
        ({"key": 5}, {"key": "5"}),
        ({"key": {"a": 1}}, {"key": '{"a":1}'}),
        ({"source": "5", "op_id": 7}, {"source": "5", "op_id": "7"}),  # an op_id's number: its text
        ({"source": " ", "op_id": " "}, {"source": None, "op_id": None}),  # blank is none
        ({"ts": TS_MS}, {"ts": TS_MS}),
        ({"ts": "1767225600000"}, {"ts": TS_MS}),
    ],
)
def test_a_valid_events_fields_are_read_as_text_numbers_and_epoch_ms(fields, expected):
    row = _one_event(_event(**fields))
    got = {k: row[k] for k in expected}
    assert json.dumps(got) == json.dumps(expected)  # NaN equal to NaN


@pytest.mark.parametrize("source", [17, 2.5, False, ["a"], {"a": 1}])
def test_a_source_that_is_no_string_is_bad_source(source):
    assert _one_event(_event(source=source)) == "bad_source"


def test_rejected_events_carry_readable_op_id_and_key():
    events = pd.DataFrame([_event(op_id=7, ts=None), _event(key=" ", op_id=" "), _event(op_id=[1])])
    _, rejected = validate_events(events)
    assert rejected[["reason", "op_id", "key"]].values.tolist() == [
        ["missing_ts", "7", "k"],
        ["missing_key", None, None],
        ["bad_op_id", None, "k"],
    ]


def test_readable_text_is_none_where_blank_or_structured():
    texts = np.array(["a", " ", "", None, " b", "c"], dtype=object)
    structured = np.array([False, False, False, False, False, True])
    assert readable(texts, structured).tolist() == ["a", None, None, None, " b", None]
    assert texts.tolist() == ["a", " ", "", None, " b", "c"]  # not changed in place


# -- the hostile corpus, as the pandas validator reads it ---------------------------------------------


def _corpus(name: str) -> tuple[list[str], list[str | None]]:
    with open(os.path.join(CORPUS, f"{name}.jsonl"), "rb") as f:
        lines = [line.decode("utf-8", errors="replace") for line in f.read().split(b"\n")[:-1]]
    with open(os.path.join(CORPUS, "expected.json"), encoding="utf-8") as f:
        reasons = json.load(f)["reasons"][name]
    return lines, [None if r in ("duplicate_op_id", "late") else r for r in reasons]  # decided by the engine


@pytest.mark.parametrize("name", ["ops-1", "ops-2", "events-1", "events-2"])
def test_the_hostile_corpus_gets_its_expected_reasons_line_by_line_and_as_one_frame(name):
    lines, expected = _corpus(name)
    now_ms = int(time.time() * 1000)
    if name.startswith("ops"):
        limits = {
            "max_timeout_ms": CONFIG.max_timeout_ms,
            "max_future_ms": CONFIG.max_future_ms,
            "now_ms": now_ms,
        }
        validate = functools.partial(validate_operations, **limits)
    else:
        validate = functools.partial(validate_events, max_future_ms=CONFIG.max_future_ms, now_ms=now_ms)
    records = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records[line] = record
    by_line = []
    for line in lines:
        if line not in records:
            by_line.append("malformed_json")
            continue
        _, rejected = validate(pd.DataFrame([records[line]]))
        by_line.append(rejected["reason"].iloc[0] if len(rejected) else None)
    assert by_line == expected
    # the whole file in one frame: columns of mixed types, each row read on its own terms
    frame = pd.DataFrame([{**record, "raw": line} for line, record in records.items()])
    valid, rejected = validate(frame)
    by_frame = {**dict.fromkeys(valid["raw"]), **dict(zip(rejected["raw"], rejected["reason"], strict=True))}
    assert by_frame == {line: e for line, e in zip(lines, expected, strict=True) if line in records}


# -- the same answer whatever shape the frame comes in ---------------------------------------------------

_KEYS = ["k1", "k2", "a", " ", "", "é"]
_ODD = [
    None,
    math.nan,
    5,
    5.0,
    5.5,
    True,
    " 5 ",
    "",
    " ",
    "[broken",
    '["x","y"]',
    {"a": 1},
    [1, "a"],
    "ANY",
    "-1",
]


@st.composite
def _operations(draw) -> pd.DataFrame:
    """A typed frame of operations (what Parquet or Spark hands over), a few cells made odd."""
    n = draw(st.integers(1, 12))

    def column(values: st.SearchStrategy) -> list:
        return draw(st.lists(values, min_size=n, max_size=n))

    frame = pd.DataFrame(
        {
            "op_id": column(st.sampled_from(["o1", "o2", " ", "o3"])),
            "keys": column(st.lists(st.sampled_from(_KEYS), max_size=3)),
            "ts": column(st.integers(-1, 9 * 10**12)),
            "timeout_ms": column(st.integers(-5, 20)),
            "condition": column(st.sampled_from(["any", "count", "sum", "all", "offset", "x"])),
            "target": column(st.sampled_from([1.0, math.nan, math.inf])),
            "members": column(st.lists(st.sampled_from(_KEYS), max_size=3)),
            "payload": column(st.sampled_from(["p", None, ""])),
        }
    )
    if draw(st.booleans()):
        frame["ts"] = pd.to_datetime(frame["ts"], unit="ms", utc=True)
    return _with_odd_cells(draw, frame)


@st.composite
def _events(draw) -> pd.DataFrame:
    n = draw(st.integers(1, 12))

    def column(values: st.SearchStrategy) -> list:
        return draw(st.lists(values, min_size=n, max_size=n))

    frame = pd.DataFrame(
        {
            "key": column(st.sampled_from(_KEYS)),
            "ts": column(st.integers(-1, 9 * 10**12)),
            "op_id": column(st.sampled_from(["o1", None, " "])),
            "source": column(st.sampled_from(["s", None, ""])),
            "value": column(st.sampled_from([1.0, math.nan, -math.inf])),
        }
    )
    return _with_odd_cells(draw, frame)


def _with_odd_cells(draw, frame: pd.DataFrame) -> pd.DataFrame:
    for _ in range(draw(st.integers(0, 3))):
        column = draw(st.sampled_from(list(frame.columns)))
        values = frame[column].to_numpy(dtype=object).copy()
        values[draw(st.integers(0, len(frame) - 1))] = draw(st.sampled_from(_ODD))
        frame[column] = pd.Series(values, dtype=object)
    return frame


def _outcome(validate, frame: pd.DataFrame) -> tuple[list, list]:
    """Valid rows and rejected rows as comparable lists (NaN as None, lists as lists)."""
    valid, rejected = validate(frame)
    return json.loads(valid.to_json(orient="values")), rejected.values.tolist()


def _as_objects(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype(object)


def _row_by_row(validate, frame: pd.DataFrame) -> tuple[list, list]:
    valid, rejected = [], []
    for i in range(len(frame)):
        v, r = _outcome(validate, frame.iloc[[i]].astype(object))
        valid += v
        rejected += r
    return valid, rejected


SHAPES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SHAPES
@given(_operations())
def test_operations_are_validated_alike_typed_as_objects_and_row_by_row(frame):
    def validate(f):
        return validate_operations(f, max_timeout_ms=10, now_ms=0)

    typed = _outcome(validate, frame)
    assert typed == _outcome(validate, _as_objects(frame))
    assert typed == _row_by_row(validate, frame)
    assert sorted({r[2] for r in typed[1]}) == sorted({r[2] for r in typed[1]} & set(OPERATION_REASONS))


@SHAPES
@given(_events())
def test_events_are_validated_alike_typed_as_objects_and_row_by_row(frame):
    typed = _outcome(validate_events, frame)
    assert typed == _outcome(validate_events, _as_objects(frame))
    assert typed == _row_by_row(validate_events, frame)
    assert {r[2] for r in typed[1]} <= set(EVENT_REASONS)


def test_the_engines_key_shorthand_frames_validate_like_keys_lists():
    frame = pd.DataFrame({"op_id": ["a", "b", "c"], "key": ["k", " ", None], "ts": 0, "timeout_ms": 5})
    valid, rejected = validate_operations(with_keys(frame), max_timeout_ms=10)
    direct_valid, direct_rejected = validate_operations(frame, max_timeout_ms=10)
    assert valid["keys"].tolist() == direct_valid["keys"].tolist() == [["k"]]
    assert rejected["reason"].tolist() == direct_rejected["reason"].tolist() == ["missing_key", "missing_key"]
