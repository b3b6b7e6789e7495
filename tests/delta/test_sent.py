"""``STAGED`` rows as a staging shard sends them (``delta.sent``): narrowed to ``SENT`` in the
worker, converted by PySpark as ``applyInPandasWithState`` converts a returned frame, and widened
on the driver, they are the rows the shard staged, value for value.  No Spark session."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.conversion import PandasToArrowConversion
from pyspark.sql.pandas.types import from_arrow_schema

from spark_purgatory.contract import PARTITION_MAXIMA
from spark_purgatory.delta.sent import OTHERS, SENT, SENT_COLUMNS, as_sent, widened
from spark_purgatory.delta.staging import CALL_COLUMNS, STAGED
from spark_purgatory.handoff.end_of_input import end_watermark_ms

_FILE = {
    "table": "outcomes",
    "partition": "2026-01-02",
    "name": "outcomes/2026-01-02/00000000000000000007-00003-0123456789ab.parquet",
    "bytes": 123_456,
    "rows": 25_525,
    "completed": 17_000,
    "expired": 8_523,
    "cancelled": 2,
}


def _call(**values) -> dict:
    """A shard call's ``STAGED`` row: every call column a distinct whole number, as given."""
    row = {name: 1_000 + i for i, name in enumerate(CALL_COLUMNS)}
    return {**row, PARTITION_MAXIMA: None, **values}


def _through_spark(rows: list[dict]) -> pa.Table:
    """``rows`` as the shard step returns them and Spark receives them (PySpark's conversion)."""
    batch = PandasToArrowConversion.convert(
        as_sent(rows), from_arrow_schema(SENT), timezone="UTC", arrow_cast=True
    )
    return pa.Table.from_batches([batch]).cast(SENT)


def test_widened_sent_rows_are_the_staged_rows():
    rows = [
        _FILE,
        {**_FILE, "table": "rejected", "partition": "", "name": "rejected/%00/x.parquet", "completed": 0},
        _call(watermark_ms=end_watermark_ms(7 * 86_400_000, 1_000), latency_p50_ms=None),
        _call(shard=2, **{PARTITION_MAXIMA: '{"operations": {"0": 5}} "quoted" é'}, expiry_lag_ms=None),
    ]
    expected = pa.Table.from_pylist(rows, schema=STAGED)
    assert widened(_through_spark(rows)).equals(expected)


def test_sent_keeps_what_spark_reads_and_packs_the_rest():
    sent = _through_spark([_FILE, _call()])
    assert sent.schema.names == [*SENT_COLUMNS, OTHERS]
    assert len(SENT) < len(STAGED) / 2  # what PySpark converts column by column
    assert sent.column("table").to_pylist() == ["outcomes", None]
    assert sent.column("pending").to_pylist() == [None, _call()["pending"]]


def test_a_batch_without_rows_widens_to_none():
    assert widened(SENT.empty_table()).equals(STAGED.empty_table())
