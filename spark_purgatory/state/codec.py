"""Arrow IPC encoding of the state layer's pieces: frames, and named parts with metadata.

A state value and every segment or delta file is one Arrow IPC stream of named binary parts
with string metadata; each part is an Arrow IPC stream of one table (``frame_bytes``), its
buffers LZ4-compressed (older zstd parts still load).

Invariant: ``frame_from(frame_bytes(f), dtypes)`` gives back ``f``'s rows and dtypes (list
columns come back as numpy arrays, which the engine accepts).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from ..engine.frames import empty

#: an encoded part or stream: Arrow's buffer as written (or read), or bytes
Encoded = bytes | pa.Buffer

#: a part's buffers: LZ4 rather than zstd, whose CPU costs a save more than the bytes it
#: spares (docs/performance-history.md)
_PART_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def pack_parts(parts: dict[str, Encoded], meta: dict[str, str]) -> bytes:
    """Named binary parts and string metadata as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    write_parts(sink, parts, meta)
    return sink.getvalue().to_pybytes()


def write_parts(sink: pa.NativeFile, parts: dict[str, Encoded], meta: dict[str, str]) -> int:
    """``pack_parts``'s stream written into ``sink``; the bytes written.

    Each part is a record batch of its own holding the part's buffer as it is (copied once,
    into ``sink``).  The metadata counts them before any: ``unpack_parts`` refuses a stream
    with fewer, one read while it is being written."""
    start = sink.tell()
    schema = _PARTS.with_metadata({**meta, _COUNT: str(len(parts))})
    with pa.ipc.new_stream(sink, schema) as writer:  # the parts are compressed
        for name, data in parts.items():
            writer.write_batch(pa.record_batch([pa.array([name], pa.string()), _binary(data)], schema=_PARTS))
    return sink.tell() - start


#: the stream of named parts: a name and its bytes a row
_PARTS = pa.schema([("part", pa.string()), ("data", pa.binary())])
#: the metadata key of how many parts a stream holds (``write_parts``)
_COUNT = "codec.parts"


def _binary(data: Encoded) -> pa.Array:
    """One binary value holding ``data`` without a copy."""
    buffer = pa.py_buffer(data) if isinstance(data, bytes) else data
    if buffer.size > np.iinfo(np.int32).max:
        raise ValueError(f"a state part of {buffer.size} bytes: more than an Arrow binary value holds")
    offsets = pa.py_buffer(np.array([0, buffer.size], np.int32))
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, buffer])


def unpack_parts(data: Encoded) -> tuple[dict[str, pa.Buffer], dict[str, str]]:
    """Inverse of ``pack_parts``; a ValueError for a stream that holds fewer parts than it
    counts (read while being written, or cut short)."""
    table = pa.ipc.open_stream(data).read_all()
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    column = table.column("data")
    parts = {name: column[i].as_buffer() for i, name in enumerate(table.column("part").to_pylist())}
    count = meta.pop(_COUNT, None)  # none in a stream written before the count
    if count is not None and len(parts) != int(count):
        raise ValueError(f"a state stream of {count} parts holds {len(parts)}: incomplete")
    return parts, meta  # type: ignore[return-value]


def frame_bytes(frame: pd.DataFrame | pa.Table, start: int = 0) -> pa.Buffer:
    """The frame (or Arrow table) as a compressed Arrow IPC stream, without pandas metadata;
    ``start``: only the rows from that position on.  An empty one's stream is encoded once
    per schema (the small tables are mostly empty, saved every time)."""
    if isinstance(frame, pa.Table):
        table = frame.slice(start) if start else frame
    else:
        columns = {name: pa.array(frame[name].to_numpy()[start:], from_pandas=True) for name in frame.columns}
        table = pa.table(columns)
    return _empty(table.schema) if table.num_rows == 0 else _stream_bytes(table)


def _stream_bytes(table: pa.Table) -> pa.Buffer:
    # Arrow's own growing buffer, not io.BytesIO: faster for a state value of megabytes
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_PART_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue()


#: each schema's empty stream (a handful of schemas: the state's tables)
_EMPTY: dict[pa.Schema, pa.Buffer] = {}


def _empty(schema: pa.Schema) -> pa.Buffer:
    data = _EMPTY.get(schema)
    if data is None:
        data = _EMPTY[schema] = _stream_bytes(schema.empty_table())
    return data


#: the end of an Arrow IPC stream (a continuation marker and a zero length)
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def spliced(streams: list[Encoded]) -> bytes | None:
    """Encoded tables (``frame_bytes``'s) of one schema as one stream holding all their rows,
    in order, without decoding or compressing them again: the first stream's schema message,
    every stream's record batches as they are, the end of the stream.  None when their
    schemas differ."""
    views = [memoryview(data).cast("B") for data in streams]
    cuts = [_schema_end(view) for view in views]
    if not views or None in cuts or any(bytes(v[-8:]) != _END_OF_STREAM for v in views):
        return _spliced_messages(streams)  # not as ``frame_bytes`` writes them: message by message
    first = views[0][: cuts[0]]
    if any(view[:cut] != first for view, cut in zip(views, cuts, strict=True)):
        return _spliced_messages(streams)  # the schemas may still be equal, written otherwise
    return b"".join([first, *(view[cut:-8] for view, cut in zip(views, cuts, strict=True)), _END_OF_STREAM])


def _schema_end(stream: memoryview) -> int | None:
    """Where a stream's schema message ends; None when it does not start with one."""
    if len(stream) < 16 or stream[:4] != b"\xff\xff\xff\xff":
        return None
    end = 8 + int.from_bytes(stream[4:8], "little")
    return end if end <= len(stream) - 8 else None


def _spliced_messages(streams: list[Encoded]) -> bytes | None:
    """``spliced`` message by message (each read and serialized again)."""
    schema, messages = None, []
    for data in streams:
        reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(data) if isinstance(data, bytes) else data)
        for message in reader:
            if message.type != "schema":
                messages.append(message.serialize())
            elif schema is None:
                schema = pa.ipc.read_schema(message)
                messages.append(message.serialize())
            elif not pa.ipc.read_schema(message).equals(schema):
                return None
    if schema is None:
        return None
    return b"".join([*(m.to_pybytes() for m in messages), _END_OF_STREAM])


def frame_from(data: Encoded, dtypes: dict[str, str]) -> pd.DataFrame:
    """Inverse of ``frame_bytes``, column by column straight into ``dtypes``."""
    table = pa.ipc.open_stream(data).read_all()
    if table.num_rows == 0:
        return empty(dtypes)
    present = set(table.column_names)
    columns = {
        name: table.column(name).to_numpy(zero_copy_only=False).astype(dtype, copy=False)
        if name in present
        else _absent(dtype, table.num_rows)
        for name, dtype in dtypes.items()
    }
    return pd.DataFrame(columns, copy=False)


def _absent(dtype: str, n: int) -> np.ndarray:
    """A column written before it existed (a flag added later): False, 0 or None; a float64 is
    NaN, none as every number of the state means it (``warn_at``: no warning asked)."""
    if dtype == "object":
        return np.full(n, None, dtype=object)
    return np.full(n, np.nan) if dtype == "float64" else np.zeros(n, dtype=dtype)


def table_from(data: Encoded, schema: pa.Schema) -> pa.Table:
    """Inverse of ``frame_bytes`` for an Arrow table of ``schema`` (no frame made)."""
    table = pa.ipc.open_stream(data).read_all()
    if table.schema.equals(schema):
        return table
    for field in schema:  # a column added since the table was written: null (``_absent``)
        if field.name not in table.column_names:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(schema.names).cast(schema)


def handles_bytes(handles: np.ndarray) -> pa.Buffer:
    """Handles (or eseqs) as a one-column ``handle`` table."""
    return frame_bytes(pa.table({"handle": pa.array(np.asarray(handles, np.int64))}))


def handles_from(data: Encoded) -> np.ndarray:
    return frame_from(data, {"handle": "int64"})["handle"].to_numpy(np.int64)
