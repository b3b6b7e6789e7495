"""The column readers of ``engine.fields`` agree with the per-value reading on every value.

The per-value functions (``text``, ``string_list`` + ``clean``, ``whole``, ``number``, ``blank``)
are the validator's rules as the module docstring of ``engine.validation`` states them; the
column readers take fast paths for typed columns (int64, float64, timestamps, ``str``, lists of
``str``) and must give the same answer as those rules applied value by value, whatever shape
the column comes in: typed, as objects, or mixed with the odd values JSON records bring.
"""

from __future__ import annotations

import decimal
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_purgatory.contract import MAX_TS_MS
from spark_purgatory.engine import fields, list_fields
from spark_purgatory.engine.fields import blank, clean, number, string_list, text, whole

TEXTS = [
    "a", "k1", "", " ", "  ", "\t", " x ", "é", "[1, 2]", '["b","a","b"]', "[broken", "{}", '{"a":1}',
    "5", " 5 ", "-5", "+5", "5.0", "1e3", "nan", "-Infinity", "1_000", "١٢", "\u00a05\u00a0",
    "ANY", " count ", "Offset\t", "true", "null", "[]", '[" "]', "\ud800", "a\x00",
    "2026-01-01T00:00:00Z", " 2026-01-01T00:00:00Z ", "2026-01-01", "2026-01-01 10:00:00",
    "2026-01-01T00:00:00+05:00", "2026-13-01", "1767225600000", " 1767225600000\n", "-1", "yesterday",
    "now", " today ", "9223372036854775807", "9223372036854775808", "2199-12-31T23:59:59Z",
    "2200-01-01T00:00:00Z",
]  # fmt: skip
ODD = [
    None, math.nan, math.inf, -math.inf, 0, 5, -5, 2**63 - 1, 2**63, -(2**63), 2**70, 5.0, 5.5, 1e20, -0.0,
    True, False, np.int64(7), np.float64(3.0), np.bool_(True), np.str_("np"), pd.NaT, pd.NA,
    pd.Timestamp("2026-01-01", tz="UTC"), pd.Timestamp("2026-01-01"), decimal.Decimal("1.5"),
    1767225600000, 1767225600000.0, MAX_TS_MS, {"x": "y"}, {}, (), ("b", "a"), np.array(["b", "a", "b"]),
    np.array([2, 1]), np.array([["x"]], dtype=object), np.array([], dtype=object),
]  # fmt: skip

text_values = st.sampled_from(TEXTS) | st.text(max_size=5)
odd_values = st.sampled_from(ODD)
list_items = text_values | st.none() | st.sampled_from([math.nan, 1, True, 2.5, ["x"], {"a": 1}])
lists = st.lists(text_values | st.none(), max_size=4) | st.lists(list_items, max_size=4)
hostile = text_values | odd_values | lists | lists.map(lambda items: np.array(items, dtype=object))


@st.composite
def columns(draw) -> pd.Series:
    """A column as pandas frames hold one: typed, all text, all lists, or mixed objects."""
    n = draw(st.integers(0, 12))
    kind = draw(
        st.sampled_from(
            ["int", "uint", "float", "time", "time_utc", "bool", "text", "lists", "arrays", "mixed"]
        )
    )
    if kind in ("int", "uint"):
        pool = (
            [0, 5, -3, 1767225600000, 2**63 - 1, -(2**63), MAX_TS_MS] if kind == "int" else [0, 5, 2**64 - 1]
        )
        return pd.Series(draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)), dtype=kind + "64")
    if kind == "float":
        pool = [
            0.0,
            5.0,
            5.5,
            -2.0,
            1e20,
            math.nan,
            math.inf,
            -math.inf,
            2.0**63,
            -(2.0**63),
            1767225600000.0,
        ]
        return pd.Series(draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)), dtype=float)
    if kind.startswith("time"):
        ms = draw(st.lists(st.integers(-(10**12), 8 * 10**12) | st.none(), min_size=n, max_size=n))
        # not pd.to_datetime(float ms, unit="ms"): with a NaN among them pandas 2.3 now and then
        # rounds garbage and raises FloatingPointError ("overflow encountered in multiply")
        s = pd.Series(
            np.array(
                [np.datetime64("NaT") if v is None else np.datetime64(v, "ms") for v in ms],
                dtype="datetime64[ns]",
            )
        )
        return s.dt.tz_localize("UTC") if kind == "time_utc" else s
    if kind == "bool":
        return pd.Series(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    strategy = {
        "text": text_values | st.none(),
        "lists": st.lists(text_values | st.none(), max_size=4) | st.none(),
        "arrays": st.lists(text_values, max_size=3).map(lambda items: np.array(items, dtype=object)),
        "mixed": hostile,
    }[kind]
    out = np.empty(n, dtype=object)
    for i, v in enumerate(draw(st.lists(strategy, min_size=n, max_size=n))):
        out[i] = v
    return pd.Series(out, dtype=object)


@pytest.fixture(autouse=True, params=["by value below SMALL", "always vectorised"])
def small(request, monkeypatch):
    """Small columns take Python's per-value path where Arrow's fixed cost is larger: both ways."""
    if request.param == "always vectorised":
        monkeypatch.setattr(fields, "SMALL", 0)


def _same(a: object, b: object) -> bool:
    """Equal values, NaN equal to NaN, lists item by item (a str subclass counts as str)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) or isinstance(b, list):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _agree(by_column, by_value) -> None:
    by_column, by_value = (
        x.tolist() if isinstance(x, np.ndarray) else list(x) for x in (by_column, by_value)
    )
    assert len(by_column) == len(by_value)
    wrong = [(i, c, v) for i, (c, v) in enumerate(zip(by_column, by_value, strict=True)) if not _same(c, v)]
    assert not wrong, wrong[:5]


CHECKS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@CHECKS
@given(columns())
def test_texts_read_every_value_as_text_does(column):
    values = column.to_numpy(dtype=object)
    got, structured = fields.texts(column, len(column))
    _agree(got, [text(v) for v in values])
    _agree(structured, [isinstance(v, fields.STRUCTURED) for v in values])


@CHECKS
@given(columns())
def test_blank_and_missing_follow_the_text_of_each_value(column):
    values = column.to_numpy(dtype=object)
    _agree(fields.missing(column, len(column)), [blank(text(v)) for v in values])
    _agree(fields.blanks(fields.texts(column, len(column))[0]), [blank(text(v)) for v in values])


@CHECKS
@given(columns())
def test_given_is_every_value_that_is_not_missing(column):
    values = column.to_numpy(dtype=object)
    expected = [
        not (v is None or (not isinstance(v, (str, *fields.STRUCTURED)) and pd.isna(v))) for v in values
    ]
    _agree(fields.given(column, len(column)), expected)


@CHECKS
@given(columns())
def test_clean_lists_read_every_value_as_string_list_and_clean_do(column):
    values = column.to_numpy(dtype=object)
    got, listed, lengths = list_fields.clean_lists(column, len(column))
    read = [string_list(v) for v in values]
    _agree(got, [clean(items) for items in read])
    _agree(listed, [items is not None for items in read])
    _agree(lengths, [len(clean(items)) for items in read])
    assert len({id(items) for items in got}) == len(got)  # a list of its own for each row


@CHECKS
@given(columns())
def test_clean_lists_in_their_order_read_every_value_as_clean_in_its_order_does(column):
    values = column.to_numpy(dtype=object)
    got, _, lengths = list_fields.clean_lists(column, len(column), keep_order=True)
    expected = [clean(string_list(v), keep_order=True) for v in values]
    _agree(got, expected)
    _agree(lengths, [len(items) for items in expected])


@CHECKS
@given(columns())
def test_non_texts_are_the_present_values_that_are_no_string(column):
    values = column.to_numpy(dtype=object)
    expected = [not isinstance(v, str) and text(v) is not None for v in values]
    _agree(fields.non_texts(column, len(column)), expected)


@CHECKS
@given(columns())
def test_wholes_read_every_value_as_whole_does(column):
    values = column.to_numpy(dtype=object)
    got, has = fields.wholes(column, len(column))
    expected = [whole(v) for v in values]
    _agree(has, [w is not None for w in expected])
    _agree([int(g) if h else None for g, h in zip(got, has, strict=True)], expected)


@CHECKS
@given(columns())
def test_numbers_read_every_value_as_number_does(column):
    values = column.to_numpy(dtype=object)
    _agree(
        fields.numbers(column, len(column)).tolist(),
        [math.nan if (x := number(v)) is None else x for v in values],
    )


def _epoch_ms_of_one(v: object) -> float:
    """The rule for one event time: epoch-ms digits or ISO-8601 text of the contract's shapes
    (``contract.EPOCH_MS_TEXT``, ``TS_TEXT``), a datetime, a whole number; NaN otherwise and
    outside [1970, 2200)."""
    if isinstance(v, str) and not fields._EPOCH_MS.fullmatch(v):
        text = str(v).strip(fields._TS_BLANKS)
        parsed = pd.to_datetime(pd.Series([text], dtype=object), utc=True, format="ISO8601", errors="coerce")
        unread = parsed.isna()[0] or not fields._TS.fullmatch(v)
        ms = math.nan if unread else parsed[0].value // 1_000_000
    elif isinstance(v, str) or not isinstance(v, (pd.Timestamp, np.datetime64)):
        ms = math.nan if (w := whole(v)) is None else w
    else:
        ms = math.nan if pd.isna(v) else pd.Timestamp(v).value // 1_000_000
    return float(ms) if 0 <= ms < MAX_TS_MS else math.nan


@CHECKS
@given(columns())
def test_epoch_ms_reads_every_value_as_the_rule_for_one_does(column):
    got = fields.epoch_ms(column)
    _agree(got.tolist(), [_epoch_ms_of_one(v) for v in column.to_numpy(dtype=object)])


def test_reading_leaves_the_callers_column_as_it_was():
    column = pd.Series([5.5, 6.0])
    fields.epoch_ms(column)
    assert column.tolist() == [5.5, 6.0]


@pytest.mark.parametrize(
    "values, expected",
    [
        ([["b", "a", "b", " ", None, ""]], [["a", "b"]]),  # blanks dropped, deduplicated, sorted
        ([np.array(["z", "y"], dtype=object), ["k"], []], [["y", "z"], ["k"], []]),
        ([["b", 1, None], ["a"]], [["1", "b"], ["a"]]),  # a number in a list is its text
        (['["x", "w"]', "solo", "[broken", {"x": 1}, None], [["w", "x"], ["solo"], [], [], []]),
    ],
)
def test_clean_lists_by_example(values, expected):
    column = pd.Series(np.array(values + [None], dtype=object)[:-1])
    assert list_fields.clean_lists(column, len(values))[0].tolist() == expected


def test_an_operations_keys_keep_their_order_each_at_its_first_place():
    values = [["b", "a", "b", " ", None, "c", "a"], ["z", "y"], ["z", "y"], '["x", "w", "x"]']
    column = pd.Series(np.array(values + [None], dtype=object)[:-1])
    got = list_fields.clean_lists(column, len(values), keep_order=True)[0].tolist()
    assert got == [["b", "a", "c"], ["z", "y"], ["z", "y"], ["x", "w"]]


def test_one_item_lists_make_a_list_per_item():
    out = list_fields.one_item_lists(np.array(["a", "b"], dtype=object))
    assert out.shape == (2,) and out.tolist() == [["a"], ["b"]]


def test_a_whole_number_among_control_characters_is_read_as_spark_reads_it_and_raises_nothing():
    """``"0\\x1f"`` raised ``ValueError`` in ``whole`` once (a pattern took U+001F, ``int``
    did not strip it), so a hostile ``timeout_ms`` stopped the pandas checks.  Spark's cast
    to BIGINT ignores U+0000-U+0020 and U+007F around the digits (``contract.WHOLE_TRIM``),
    and nothing else: a no-break space makes the text no number."""
    assert fields.whole("0\x1f") == 0 and fields.whole(" 7 ") == 7 and fields.whole("\u00a07") is None
    assert fields.wholes(pd.Series(["0\x1f", "5", "5\u2028"]), 3)[1].tolist() == [True, True, False]
