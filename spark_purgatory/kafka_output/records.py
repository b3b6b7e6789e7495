"""The output topic's records: one per outcome (and per rejected row, when asked), built from
the rows the Delta tables get.

A record's **key** is the ``op_id`` (UTF-8), its **value** the row as one JSON object
(timestamps as ISO-8601 UTC with milliseconds, a missing value as ``null``), its **headers**
``purgatory.status`` (an outcome's status, ``rejected`` or ``warning``), ``purgatory.checkpoint``,
``purgatory.batch`` and, on a record too large for ``message.max.bytes``, ``purgatory.omitted``
(the fields left ``null``).  docs/kafka-output.md and ``docs/schemas/kafka-outcome.schema.json``
describe them.

>>> import datetime as dt, pyarrow as pa
>>> at = dt.datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=dt.timezone.utc)
>>> deadline = pa.array([at], pa.timestamp("us", "UTC"))
>>> rows = pa.table({"op_id": ["a"], "status": ["expired"], "deadline": deadline})
>>> [(key, value) for key, value, _ in records(rows, "expired", checkpoint="q1", batch_id=7)]
[(b'a', b'{"op_id":"a","status":"expired","deadline":"2026-03-01T12:00:00.250Z"}')]
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..config import OUTPUT_KAFKA_STATUSES
from ..contract import KIND_REJECTED, KIND_WARNING, REJECTED, WARNINGS

#: what ``output.kafka.statuses`` may name: the outcomes' statuses, the rejected rows, the warnings
STATUSES = OUTPUT_KAFKA_STATUSES
REJECTED_STATUS = KIND_REJECTED
#: the tables besides ``outcomes`` whose every row is a record, by the status naming them
WHOLE_TABLES = {KIND_REJECTED: REJECTED, KIND_WARNING: WARNINGS}
HEADER_STATUS = "purgatory.status"
HEADER_CHECKPOINT = "purgatory.checkpoint"
HEADER_BATCH = "purgatory.batch"
HEADER_OMITTED = "purgatory.omitted"
#: librdkafka's ``message.max.bytes`` default: the largest record sent as it is
MAX_RECORD_BYTES = 1_000_000
#: what a record carries beside its key and value (headers, Kafka's record overhead)
_ENVELOPE_BYTES = 1024
#: the fields a record too large goes without, in order: the payload (an outcome's) or the
#: raw record (a rejected row's), then the keys
OMITTABLE = ("payload", "raw", "keys")

Record = tuple[bytes | None, bytes, list[tuple[str, bytes]]]


def records(
    rows: pa.Table, status: str | None, *, checkpoint: str, batch_id: int, max_bytes: int = MAX_RECORD_BYTES
) -> Iterator[Record]:
    """The records of ``rows`` (one table's rows, in its columns): ``(key, value, headers)``.

    ``status``: the header's status for every row; None reads each row's ``status``.  A record
    larger than ``max_bytes`` (``message.max.bytes``) goes without its biggest texts
    (``OMITTABLE``), each left ``null`` and named in the ``purgatory.omitted`` header: the
    outcome still reaches its consumers, and the row in the table has it all.

    >>> big = pa.table({"op_id": ["a"], "keys": [["k"]], "payload": ["x" * 5000]})
    >>> ((_, value, headers),) = records(big, "expired", checkpoint="q", batch_id=0, max_bytes=2048)
    >>> value, headers[-1]
    (b'{"op_id":"a","keys":["k"],"payload":null}', ('purgatory.omitted', b'payload=5002'))
    """
    columns = [_json_ready(rows.column(name)) for name in rows.column_names]
    names = rows.column_names
    keys = rows.column("op_id").to_pylist() if "op_id" in names else [None] * rows.num_rows
    statuses = rows.column("status").to_pylist() if status is None else [status] * rows.num_rows
    common = [(HEADER_CHECKPOINT, checkpoint.encode()), (HEADER_BATCH, str(batch_id).encode())]
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    for i in range(rows.num_rows):
        row = dict(zip(names, (c[i] for c in columns), strict=True))
        value = encode(row).encode()
        key = keys[i].encode() if keys[i] is not None else None
        headers = [(HEADER_STATUS, str(statuses[i]).encode()), *common]
        budget = max_bytes - _ENVELOPE_BYTES - len(key or b"")
        if len(value) > budget:
            value, omitted = _without_biggest(row, encode, budget)
            headers.append((HEADER_OMITTED, omitted.encode()))
        yield key, value, headers


def _without_biggest(row: dict, encode, budget: int) -> tuple[bytes, str]:
    """``row``'s JSON with its ``OMITTABLE`` fields set to null, in order, until it fits."""
    omitted = []
    value = b""
    for name in OMITTABLE:
        if row.get(name) is not None:
            omitted.append(f"{name}={len(encode(row[name]).encode())}")
            row[name] = None
            value = encode(row).encode()
            if len(value) <= budget:
                break
    return value or encode(row).encode(), ",".join(omitted)


def _json_ready(column: pa.ChunkedArray) -> list:
    """A column's values as JSON takes them: timestamps and dates as ISO-8601 text, a float
    that is no number (NaN, infinite) as null."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        as_ms = pc.cast(column, pa.timestamp("ms", "UTC"), safe=False)  # emitted_at has µs: cut
        return [None if ms is None else _iso_ms(ms) for ms in pc.cast(as_ms, pa.int64()).to_pylist()]
    if pa.types.is_date(kind):
        return [None if d is None else d.isoformat() for d in column.to_pylist()]
    if pa.types.is_floating(kind):
        return [v if v is not None and math.isfinite(v) else None for v in column.to_pylist()]
    return column.to_pylist()


def _iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC text with milliseconds and a ``Z``."""
    seconds, rest = divmod(ms, 1000)
    at = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
    return f"{at:%Y-%m-%dT%H:%M:%S}.{rest:03d}Z"
