"""The state's encoding (``state.codec``): named parts written straight into a file, change
streams spliced by cutting them where their messages are, empty tables' streams reused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from spark_purgatory.state import codec
from spark_purgatory.state.codec import (
    frame_bytes,
    frame_from,
    handles_bytes,
    handles_from,
    pack_parts,
    spliced,
    table_from,
    unpack_parts,
    write_parts,
)

_SCHEMA = pa.schema([("handle", pa.int64()), ("op_id", pa.string()), ("members", pa.list_(pa.string()))])


def _table(handles: range) -> pa.Table:
    return pa.table(
        {
            "handle": list(handles),
            "op_id": [f"o{h}" if h % 3 else None for h in handles],
            "members": [[f"m{h}"] * (h % 3) for h in handles],
        },
        schema=_SCHEMA,
    )


def test_parts_written_into_a_file_read_back_as_packed(tmp_path):
    """Bytes and Arrow buffers alike, an empty part, the metadata; the size returned is the
    file's, and the file reads as ``pack_parts``'s value does."""
    parts = {"a": b"xyz", "b": pa.py_buffer(b""), "c": handles_bytes(np.arange(5)), "d": bytes(range(256))}
    meta = {"format": "4", "chain": '[["x", 3]]'}
    fs = pafs.LocalFileSystem()
    with fs.open_output_stream(str(tmp_path / "f.arrow")) as out:
        size = write_parts(out, parts, meta)
    data = (tmp_path / "f.arrow").read_bytes()
    assert size == len(data)
    for value in (data, pack_parts(parts, meta)):
        read, read_meta = unpack_parts(value)
        assert read_meta == meta
        assert {k: bytes(v) for k, v in read.items()} == {k: bytes(v) for k, v in parts.items()}
    assert handles_from(unpack_parts(data)[0]["c"]).tolist() == [0, 1, 2, 3, 4]
    assert unpack_parts(pack_parts({}, {"k": "v"})) == ({}, {"k": "v"})


def test_spliced_streams_hold_every_row_in_order(monkeypatch):
    """Cut where their messages are (bytes or buffers, an empty one among them; no message
    read): one stream of all their rows, as the tables concatenated."""
    monkeypatch.setattr(codec, "_spliced_messages", None)  # not called
    tables = [_table(range(0, 7)), _table(range(7, 7)), _table(range(7, 20))]
    streams = [frame_bytes(t) for t in tables]
    streams[0] = bytes(streams[0])
    data = spliced(streams)
    assert table_from(data, _SCHEMA).equals(pa.concat_tables(tables))


def test_streams_written_otherwise_are_spliced_message_by_message_and_other_schemas_refused():
    """A stream whose schema message differs in bytes (metadata) is spliced after reading its
    messages; a stream of another schema makes the splice None (the caller encodes the rows)."""
    plain, noted = _table(range(3)), _table(range(3, 5)).replace_schema_metadata({"note": "x"})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, noted.schema) as writer:
        writer.write_table(noted)
    data = spliced([frame_bytes(plain), sink.getvalue()])
    assert table_from(data, _SCHEMA).equals(pa.concat_tables([plain, noted.replace_schema_metadata(None)]))
    other = pa.table({"handle": [1, 2]})
    assert spliced([frame_bytes(plain), frame_bytes(other)]) is None


def test_an_empty_frame_encodes_as_before_and_its_stream_is_reused():
    """The small tables are mostly empty: each schema's empty stream is made once; it reads
    back as the empty frame of its dtypes, and a non-empty frame of the same columns is
    encoded afresh."""
    dtypes = {"eseq": "int64", "key": "object", "used": "bool"}
    empty_frame = pd.DataFrame({c: pd.Series(dtype=t) for c, t in dtypes.items()})
    first, again = frame_bytes(empty_frame), frame_bytes(empty_frame.copy())
    assert first is again
    assert frame_from(first, dtypes).dtypes.astype(str).to_dict() == dtypes
    rows = pd.DataFrame({"eseq": [4, 5], "key": ["a", None], "used": [True, False]})
    back = frame_from(frame_bytes(rows), dtypes)
    assert back.astype(object).where(back.notna(), None).values.tolist() == [[4, "a", True], [5, None, False]]


def test_a_stream_cut_between_its_parts_is_refused():
    """A file read while it is being written (cut after its first part) holds fewer parts
    than its metadata counts: refused, never taken for a state with parts missing."""
    whole = pack_parts({"a": b"x" * 10, "b": b"y" * 20}, {"format": "4"})
    messages = list(pa.ipc.MessageReader.open_stream(pa.py_buffer(whole)))
    cut = b"".join(m.serialize().to_pybytes() for m in messages[:2])  # the schema, the first part
    with pytest.raises(ValueError, match="2 parts holds 1"):
        unpack_parts(cut)


def test_a_number_column_written_before_it_existed_reads_as_none_not_zero():
    """State written before ``warn_at`` (the only float64 column of the state a supported
    version lacks: every other one is in 0.1.0's) reads as no warning asked: NaN, as a value,
    target, progress or floor that is not there, where 0 would be one."""
    from spark_purgatory.engine.pending import OPS_ARROW
    from spark_purgatory.engine.tables import OPS, PARKED

    for dtypes in (OPS, PARKED):
        old = pd.DataFrame({"ts": np.array([5], np.int64), "stub": [False]})
        assert np.isnan(frame_from(frame_bytes(old), dtypes)["warn_at"]).all()
    old = pa.table({"handle": pa.array([1], pa.int64())})
    assert table_from(frame_bytes(old.to_pandas()), OPS_ARROW).column("warn_at").null_count == 1
