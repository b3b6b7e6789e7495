"""One table, every path: each record of the contract table (``table``) gets the same reason,
or is read to the same row, on every path that reads it (``paths``).

A path gives the reasons of the stages it runs (``contract.reasons``); for the others it
declares here why it cannot give them (``LACKS``), and the test checks the declaration: a case
whose reason belongs to a stage a path lacks comes out of that path valid, read to the row
the other paths read.  Every reason is given by a case on every path that runs its stage.

The Spark paths cost two Spark jobs over the whole table (``paths.spark_answers``).
"""

from __future__ import annotations

import numpy as np
import pytest

from spark_purgatory import contract as c
from spark_purgatory.spark.key_hash import shards_of

from .paths import JSON_PATHS, PATHS, Answer, Answers, loose, pandas_answers, runs, spark_answers, text_of
from .table import ACROSS_SHARDS, CASES, CONFIG, PAIRS, SAME, Case

pytestmark = [pytest.mark.spark, pytest.mark.jars("checks")]

_AFTER_READING = "the shards decide it, after the record is read and routed"
_TYPED = "a typed row has no text: nothing to be too large, too deep or malformed"
_TYPED_TYPES = "a typed column holds values of its type only"
_NO_SHARDS = "it knows no shards: routing gives this reason, before the shards"
#: each path's stages it does not run (``contract.reasons.STAGES``), and why
LACKS: dict[str, dict[str, str]] = {
    "files": {c.REGISTRY: _AFTER_READING, c.WATERMARK: _AFTER_READING},
    "kafka": {c.REGISTRY: _AFTER_READING, c.WATERMARK: _AFTER_READING},
    "typed-sql": {
        c.READ: _TYPED,
        c.TYPE: _TYPED_TYPES,
        c.REGISTRY: _AFTER_READING,
        c.WATERMARK: _AFTER_READING,
    },
    "typed-jvm": {
        c.READ: _TYPED,
        c.TYPE: _TYPED_TYPES,
        c.REGISTRY: _AFTER_READING,
        c.WATERMARK: _AFTER_READING,
    },
    "typed-rows": {
        c.READ: _TYPED,
        c.TYPE: _TYPED_TYPES,
        c.REGISTRY: _AFTER_READING,
        c.WATERMARK: _AFTER_READING,
    },
    "batch": {
        c.CLOCK: "a backfill has no processing time to compare with: purgatory_batch skips ts_in_future",
        c.WATERMARK: "purgatory_batch reads all its input in one micro-batch at watermark 0",
    },
    "pandas": {
        c.READ: "records have no text: nothing to be too large, too deep or malformed",
        c.ROUTING: _NO_SHARDS,
        c.REGISTRY: "Purgatory.process decides it, after validation",
        c.WATERMARK: "Purgatory.process decides it, after validation",
    },
    "lines": {
        c.ROUTING: _NO_SHARDS,
        c.REGISTRY: "Purgatory.process decides it, after validation",
        c.WATERMARK: "Purgatory.process decides it, after validation",
    },
    "tester-lines": {
        c.CLOCK: "PurgatoryTester has no processing time: it skips ts_in_future",
    },
    "tester-records": {
        c.READ: "records have no text: nothing to be too large, too deep or malformed",
        c.CLOCK: "PurgatoryTester has no processing time: it skips ts_in_future",
    },
}


@pytest.fixture(scope="module")
def answers(spark, tmp_path_factory) -> Answers:
    found = spark_answers(spark, str(tmp_path_factory.mktemp("contract-table")))
    found.update(pandas_answers())
    return found


#: the paths that read the typed records as a pandas frame (``table.Case.in_frames``)
FRAMES = ("pandas", "tester-records")


def expected(case: Case, path: str) -> str | None:
    """The reason ``path`` must give ``case``: the case's, unless the path lacks its stage
    (or reads a frame, where the case says pandas means another thing); of a pair's two
    reasons (``table.PAIRS``) the first whose stage the path runs: the contract's order."""
    if path in FRAMES and case.in_frames is not SAME:
        return case.in_frames
    ran = [r for r in case.reasons or (case.reason,) if r is None or c.STAGE_OF[r] not in LACKS[path]]
    return ran[0] if ran else None


def _shown(case: Case, answer: Answer) -> dict:
    """The expected row, with the fields the path's answer shows (an outcome has no members)."""
    return {name: value for name, value in case.row.items() if name in answer.fields}


def test_every_path_gives_each_record_the_contracts_answer(answers):
    wrong = []
    for case in CASES:
        for path in PATHS:
            if not runs(case, path):
                continue
            answer = answers[path].get(case.id)
            want = expected(case, path)
            if answer is None:
                wrong.append((case.id, path, want, "no answer"))
            elif answer.reason != want:
                wrong.append((case.id, path, want, answer.reason))
            elif want is None and case.row is not None and answer.fields != _shown(case, answer):
                wrong.append((case.id, path, case.row, answer.fields))
    assert not wrong, "\n".join(map(repr, wrong))


def test_a_rejected_record_shows_the_same_op_id_and_key_on_every_path(answers):
    wrong = []
    for case in CASES:
        shown = {
            path: answers[path][case.id].fields
            for path in PATHS
            if runs(case, path) and expected(case, path) and case.id in answers[path]
        }
        if len({tuple(sorted(f.items())) for f in shown.values()}) > 1:
            wrong.append((case.id, shown))
    assert not wrong, "\n".join(map(repr, wrong))


def _kept(line: str) -> str:
    """What ``raw`` keeps of a line: all of it, or for a record too large its start and size."""
    size = len(line.encode("utf-8"))
    if size <= CONFIG.input_max_record_bytes:
        return line
    return line[: c.RAW_KEPT_CHARS] + c.RAW_TRUNCATED.format(bytes=size)


def test_a_record_rejected_as_it_is_read_keeps_its_line_as_raw(answers):
    """Files, the batch, the lines and the tester show the line, a record too large its
    first ``RAW_KEPT_CHARS`` characters and its size (Kafka shows the record as JSON)."""
    wrong = []
    for case in CASES:
        if case.line is None or case.stage in (c.ROUTING, c.REGISTRY, c.WATERMARK):
            continue
        want = _kept(text_of(case.line))
        for path in JSON_PATHS:
            answer = answers[path].get(case.id)
            if (
                path != "kafka"
                and case.reason
                and expected(case, path) == case.reason
                and answer
                and answer.raw != want
            ):
                wrong.append((case.id, path, answer.raw[:80]))
    assert not wrong, "\n".join(map(repr, wrong))


#: the paths that read typed records
TYPED_PATHS = ("typed-sql", "typed-jvm", "typed-rows", *FRAMES)


def test_a_typed_record_rejected_as_it_is_read_shows_the_same_raw_on_every_path(answers):
    """The record as Spark's ``to_json`` writes a typed row, the engine's too.  Left out: a
    NaN in a frame, a missing value there (the contract's own difference, ``in_frames``), and
    the records of the other types: a whole number in a double column, which Spark writes
    ``500.0`` and the engine by the contract's type (a whole ``timeout_ms``), since a frame's
    int column with gaps is a float column."""
    wrong = []
    for case in CASES:
        if case.record is None or case.records_only or case.in_frames is not SAME or loose(case):
            continue
        if case.stage not in (c.FIELD, c.CLOCK):
            continue
        raws = {
            path: answers[path][case.id].raw
            for path in TYPED_PATHS
            if case.reason and expected(case, path) == case.reason and case.id in answers[path]
        }
        if len(set(raws.values())) != 1:
            wrong.append((case.id, raws))
    assert not wrong, "\n".join(map(repr, wrong))


def test_every_reason_is_given_on_every_path_that_runs_its_stage(answers):
    missing = []
    for reason in c.REASONS:
        stage = c.STAGE_OF[reason]
        for path in PATHS:
            given = [k.name for k in CASES if k.reason == reason and runs(k, path)]
            if stage not in LACKS[path] and not given:
                missing.append((reason, path))
    assert not missing, missing


def test_the_declarations_are_of_real_stages_and_the_table_covers_every_reason():
    assert {stage for lacks in LACKS.values() for stage in lacks} <= set(c.STAGES)
    assert set(LACKS) == set(PATHS)
    assert {k.reason for k in CASES} - {None} == set(c.REASONS)
    # every two reasons an operation (or an event) can have at once is a pair of the table, in
    # the contract's order: all but malformed_json's, whose record has no field to add to
    for source, order in ((c.SOURCE_OPERATIONS, c.OPERATION_REASONS), (c.SOURCE_EVENTS, c.EVENT_REASONS)):
        pairs = {k.reasons for k in PAIRS if k.source == source}
        assert all(order.index(a) < order.index(b) for a, b in pairs)
        assert {r for pair in pairs for r in pair} == set(order) - {c.MALFORMED_JSON}
    for source, schema in ((c.SOURCE_OPERATIONS, c.OPERATION_INPUT), (c.SOURCE_EVENTS, c.EVENT_INPUT)):
        assert list(c.READINGS[source]) == schema.names  # every field has its reading
    # a stage a typed path lacks cannot be written as a typed record at all
    for case in CASES:
        if case.stage in (c.READ,) or (case.stage == c.TYPE and not case.records_only):
            assert case.record is None, case.name
    # the table's settings: cross_shard_keys needs keys in two shards, the others in one
    shards = shards_of(np.array(ACROSS_SHARDS, dtype=object), CONFIG.shards, CONFIG.shard_key_delimiter)
    assert len(set(shards)) == 2
    names = (
        {k.name for k in CASES if k.source == c.SOURCE_OPERATIONS},
        {k.name for k in CASES if k.source == c.SOURCE_EVENTS},
    )
    assert sum(map(len, names)) == len(CASES), "case names are unique per input"
