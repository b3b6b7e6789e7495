"""The output topic's record format (``kafka_output.records``), without a broker: each value
valid under the published JSON Schema (``docs/schemas/kafka-outcome.schema.json``), whose
properties are the tables' columns (who answered too), timestamps to the millisecond, headers;
a warning's record only when the topic asks for warnings."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_purgatory.contract import OUTCOMES, REJECTED, WARNINGS
from spark_purgatory.kafka_output import TopicOutput
from spark_purgatory.kafka_output.producer import Send, TopicSettings, _records_of
from spark_purgatory.kafka_output.records import HEADER_BATCH, HEADER_CHECKPOINT, HEADER_STATUS, records
from spark_purgatory.storage import Storage

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "docs" / "schemas" / "kafka-outcome.schema.json").read_text()
)
AT = dt.datetime(2026, 3, 1, 12, 5, 0, 7000, tzinfo=dt.timezone.utc)


def outcome_rows() -> pa.Table:
    row = {
        "op_id": "pay-1",
        "keys": ["acct-7", "acct-8"],
        "status": "expired",
        "op_ts": AT - dt.timedelta(minutes=5),
        "deadline": AT,
        "resolved_at": AT,
        "latency_ms": 300_000,
        "matched_events": 1,
        "progress": float("nan"),
        "condition": "count",
        "target": 2.0,
        "payload": '{"amount": "12€"}',
        "reported": ["card-api"],
        "missing": None,
        "batch_id": 88,
        "emitted_at": AT + dt.timedelta(microseconds=1_312_999),
        "resolved_date": AT.date(),
    }
    return pa.Table.from_pylist(
        [row, {**row, "op_id": "pay-2", "status": "cancelled", "payload": None}], OUTCOMES.schema
    )


def test_the_schemas_properties_are_the_tables_columns():
    assert list(SCHEMA["$defs"]["outcome"]["properties"]) == OUTCOMES.schema.names
    assert list(SCHEMA["$defs"]["rejected"]["properties"]) == REJECTED.schema.names
    assert list(SCHEMA["$defs"]["warning"]["properties"]) == WARNINGS.schema.names


def test_an_outcomes_record_is_valid_under_the_schema_to_the_millisecond():
    (key, value, headers), (key2, value2, headers2) = records(
        outcome_rows(), None, checkpoint="chk-1", batch_id=88
    )
    parsed = json.loads(value)
    jsonschema.validate(parsed, SCHEMA)
    assert key == b"pay-1" and key2 == b"pay-2"
    assert parsed["deadline"] == "2026-03-01T12:05:00.007Z"
    assert parsed["emitted_at"] == "2026-03-01T12:05:01.319Z"  # microseconds cut, not rounded
    assert parsed["progress"] is None  # NaN is no JSON number
    assert parsed["payload"] == '{"amount": "12€"}' and "€" in value.decode()
    assert dict(headers) == {HEADER_STATUS: b"expired", HEADER_CHECKPOINT: b"chk-1", HEADER_BATCH: b"88"}
    assert dict(headers2)[HEADER_STATUS] == b"cancelled" and json.loads(value2)["payload"] is None
    jsonschema.validate(json.loads(value2), SCHEMA)  # a withdrawn operation's outcome too


def test_a_quorums_record_names_who_reported_and_who_did_not():
    row = {**outcome_rows().to_pylist()[0], "condition": "quorum", "target": 2.0}
    rows = pa.Table.from_pylist([{**row, "reported": ["bo"], "missing": ["ana", "chen"]}], OUTCOMES.schema)
    ((_, value, _),) = records(rows, None, checkpoint="chk-1", batch_id=88)
    parsed = json.loads(value)
    jsonschema.validate(parsed, SCHEMA)
    assert (parsed["reported"], parsed["missing"]) == (["bo"], ["ana", "chen"])


def test_a_rejected_record_has_no_key_without_a_readable_op_id():
    rows = pa.Table.from_pylist(
        [
            {
                "source": "operations",
                "raw": "{not json",
                "reason": "malformed_json",
                "batch_id": 3,
                "rejected_date": AT.date(),
            },
            {
                "source": "events",
                "raw": '{"key":"k"}',
                "reason": "bad_ts",
                "op_id": "x",
                "key": "k",
                "batch_id": 3,
            },
        ],
        REJECTED.schema,
    )
    (key, value, headers), (key2, _, _) = records(rows, "rejected", checkpoint="chk-1", batch_id=3)
    jsonschema.validate(json.loads(value), SCHEMA)
    assert key is None and key2 == b"x" and dict(headers)[HEADER_STATUS] == b"rejected"


@pytest.mark.parametrize("statuses", [("expired",), ("expired", "warning"), ("warning",)])
def test_a_warning_is_a_record_with_status_warning_only_when_the_topic_asks_for_warnings(statuses, tmp_path):
    """A staged ``warnings`` file as the send reads it: its rows become records (header
    ``purgatory.status: warning``, valid under the schema) when ``output.kafka.statuses``
    names ``warning``, else none, and the topic takes the table's files only then."""
    row = {"op_id": "pay-1", "keys": ["acct-7"], "deadline": AT, "warned_at": AT - dt.timedelta(minutes=10),
           "progress": 0.5, "reported": ["bo"], "missing": ["ana"], "payload": None, "batch_id": 5,
           "emitted_at": AT, "warned_date": AT.date()}  # fmt: skip
    pq.write_table(pa.Table.from_pylist([row], WARNINGS.schema), tmp_path / "w.parquet")
    settings = TopicSettings("t", statuses, (), "chk-1")
    sent = list(_records_of(Send(settings, (), Storage()), "warnings", str(tmp_path / "w.parquet"), 5))
    asked = "warning" in statuses
    assert ("warnings" in TopicOutput(settings, Storage()).tables) == asked
    assert ("outcomes" in TopicOutput(settings, Storage()).tables) == ("expired" in statuses)
    assert len(sent) == asked
    for key, value, headers in sent:
        parsed = json.loads(value)
        jsonschema.validate(parsed, SCHEMA)
        assert key == b"pay-1" and dict(headers)[HEADER_STATUS] == b"warning"
        assert (parsed["warned_at"], parsed["missing"]) == ("2026-03-01T11:55:00.007Z", ["ana"])


def test_a_time_before_1970_is_written_as_iso_text_too():
    rows = pa.table(
        {
            "op_id": ["old"],
            "op_ts": pa.array([dt.datetime(1969, 12, 31, 23, 59, 59, 500000)], pa.timestamp("us", "UTC")),
        }
    )
    ((_, value, _),) = records(rows, "expired", checkpoint="c", batch_id=0)
    assert json.loads(value)["op_ts"] == "1969-12-31T23:59:59.500Z"


@pytest.mark.parametrize("bad", [float("inf"), float("-inf")])
def test_an_infinite_number_is_null(bad):
    rows = pa.table({"op_id": ["o"], "target": [bad]})
    ((_, value, _),) = records(rows, "expired", checkpoint="c", batch_id=0)
    assert json.loads(value)["target"] is None


def test_a_record_larger_than_the_producer_sends_goes_without_its_payload_and_says_so():
    rows = outcome_rows().slice(0, 1)
    rows = rows.set_column(rows.schema.get_field_index("payload"), "payload", pa.array(["p" * 1_040_000]))
    ((key, value, headers),) = records(rows, None, checkpoint="chk-1", batch_id=88)
    assert len(value) < 1_000_000 - 1024
    parsed = json.loads(value)
    jsonschema.validate(parsed, SCHEMA)
    assert parsed["payload"] is None and parsed["keys"] == ["acct-7", "acct-8"] and key == b"pay-1"
    assert dict(headers)["purgatory.omitted"] == b"payload=1040002"
    # a rejected row's raw text the same way, with the producer's own message.max.bytes
    bad = pa.Table.from_pylist(
        [{"source": "operations", "raw": "r" * 5000, "reason": "malformed_json", "batch_id": 1}],
        REJECTED.schema,
    )
    ((_, value, headers),) = records(bad, "rejected", checkpoint="c", batch_id=1, max_bytes=3000)
    assert json.loads(value)["raw"] is None and dict(headers)["purgatory.omitted"] == b"raw=5002"
