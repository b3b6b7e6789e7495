"""Arrow IPC encoding of the state layer's pieces: frames, and named parts with metadata.

A shard's state value and every segment file are one Arrow IPC stream of named binary
parts (``pack_parts``) with string metadata; each part is itself an Arrow IPC stream of one
table (``frame_bytes``), its buffers compressed with zstd (format 4 on; Arrow's reader
decompresses whatever it reads).  The pending operations and their watchers are Arrow
tables already (``pending.OPS_ARROW``): their strings go from the engine's buffers to the
value as bytes, no Python object made on either side (``table_from``).

Invariant: ``frame_from(frame_bytes(f), dtypes)`` gives back ``f``'s rows and dtypes (list
columns come back as numpy arrays, which the engine accepts).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from ..engine.frames import empty

__all__ = [
    "pack_parts",
    "unpack_parts",
    "frame_bytes",
    "frame_from",
    "table_from",
    "handles_bytes",
    "handles_from",
    "spliced",
]

#: a part's buffers: zstd (Arrow's default level) keeps what does not compress (hashes,
#: random ids) as it is and shrinks what does (handles, times, offsets, similar ids)
_PART_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


def pack_parts(parts: dict[str, bytes], meta: dict[str, str]) -> bytes:
    """Named binary parts and string metadata as one Arrow IPC stream."""
    table = pa.table({"part": list(parts), "data": pa.array(list(parts.values()), pa.binary())})
    return _stream_bytes(table.replace_schema_metadata(meta), None)  # the parts are compressed


def unpack_parts(data: bytes | pa.Buffer) -> tuple[dict[str, bytes], dict[str, str]]:
    """Inverse of ``pack_parts``."""
    table = pa.ipc.open_stream(data).read_all()
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    column = table.column("data")
    parts = {name: column[i].as_buffer() for i, name in enumerate(table.column("part").to_pylist())}
    return parts, meta  # type: ignore[return-value]


def frame_bytes(frame: pd.DataFrame | pa.Table, start: int = 0) -> bytes:
    """The frame (or Arrow table, as it is) as a compressed Arrow IPC stream, each column of a
    frame converted as ``Table.from_pandas`` would (NaN as null, object columns typed by their
    values), without its pandas metadata, which ``frame_from`` never reads; ``start``: only
    the rows from that position on (of a frame: no sliced frame made)."""
    if isinstance(frame, pa.Table):
        return _stream_bytes(frame.slice(start) if start else frame)
    columns = {name: pa.array(frame[name].to_numpy()[start:], from_pandas=True) for name in frame.columns}
    return _stream_bytes(pa.table(columns))


def _stream_bytes(table: pa.Table, options: pa.ipc.IpcWriteOptions | None = _PART_OPTIONS) -> bytes:
    # Arrow's own growing buffer, not io.BytesIO: faster for a state value of megabytes
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


#: the end of an Arrow IPC stream (a continuation marker and a zero length)
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def spliced(streams: list[bytes | pa.Buffer]) -> bytes | None:
    """Encoded tables (``frame_bytes``'s) of one schema as one stream holding all their rows,
    in order, without decoding or compressing them again: the first stream's schema, every
    stream's record batches as they are (their compressed buffers), the end of the stream.
    None when their schemas differ (the caller encodes the rows itself)."""
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


def frame_from(data: bytes, dtypes: dict[str, str]) -> pd.DataFrame:
    """Inverse of ``frame_bytes``; list columns come back as numpy arrays (fine for the engine).

    Column by column, straight into ``dtypes``: no intermediate frame to cast and select.
    """
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
    """A column written before it existed (a flag added to a table later): False, 0 or None."""
    if dtype == "object":
        return np.full(n, None, dtype=object)
    return np.zeros(n, dtype=dtype)


def table_from(data: bytes, schema: pa.Schema) -> pa.Table:
    """Inverse of ``frame_bytes`` for an Arrow table of ``schema`` (as Arrow: no frame, no
    Python object per value)."""
    table = pa.ipc.open_stream(data).read_all()
    return table if table.schema.equals(schema) else table.select(schema.names).cast(schema)


def handles_bytes(handles: np.ndarray) -> bytes:
    """Handles (or eseqs) as a one-column ``handle`` table, as ``frame_bytes`` writes a frame
    of them (no frame made)."""
    return _stream_bytes(pa.table({"handle": pa.array(np.asarray(handles, np.int64))}))


def handles_from(data: bytes) -> np.ndarray:
    return frame_from(data, {"handle": "int64"})["handle"].to_numpy(np.int64)
