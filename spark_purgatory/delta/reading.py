"""Reading the output tables with delta-rs in a process that then exits cleanly: ``read_table``.

``DeltaTable(path).to_pandas()`` (and ``to_pyarrow_table`` / ``to_pyarrow_dataset`` without a
``filesystem``) reads the table's Parquet files through delta-rs's Python filesystem handler
(``pyarrow.fs.PyFileSystem(DeltaStorageHandler)``) with Arrow's pre-buffering, so Arrow's I/O
threads call into Python.  A call still in flight on such a thread when the interpreter
finalizes (the reads ahead and the closes outlive ``to_pandas``) asks for the GIL; CPython
(before 3.14) ends such a thread with ``pthread_exit``, whose unwinding through Arrow's C++
frames calls ``std::terminate``: "terminate called without an active exception", exit 134,
after the script's work is done.  Measured here: a script reading the four tables 4 of 40
runs (docs/troubleshooting.md, "Exit 134 after reading the tables").

Reading through one of pyarrow's own filesystems (``storage.Storage.filesystem``: local,
S3, GCS, Azure, with the project's ``storage.*`` settings), rooted at the table, keeps
Python out of Arrow's threads: the same rows, and no abort (0 of 40; ``tests/delta/
test_reading.py`` runs twenty fresh interpreters).

Invariant: the rows are those of ``DeltaTable(path).to_pyarrow_table()``: the files of the
table's current version, read with the table's schema.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from ..storage import Storage

__all__ = ["read_table", "table_dataset"]


def table_dataset(table: Any, path: str, storage: Storage | None = None) -> pads.Dataset:
    """``table`` (a ``DeltaTable`` at ``path``) as a pyarrow dataset read through pyarrow's
    own filesystem for ``path``, never delta-rs's Python handler (module docstring)."""
    fs, root = (storage or Storage()).filesystem(path)
    return table.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, fs))


def read_table(
    path: str,
    *,
    storage: Storage | None = None,
    columns: list[str] | None = None,
    filter: pads.Expression | None = None,  # noqa: A002 - pyarrow's name for it
) -> pa.Table:
    """The Delta table at ``path`` (an output table: ``<output>/outcomes`` ...) as an Arrow
    table, read so that the process exits cleanly afterwards (module docstring).

    Args:
        path: the table, a path or URI.
        storage: the ``storage.*`` settings for a URI (endpoint, region ...).
        columns: the columns to read (all when None).
        filter: a ``pyarrow.dataset`` expression on the rows.

    Example::

        from spark_purgatory import read_table

        outcomes = read_table("/data/tables/outcomes").to_pandas()
    """
    from .writers import open_table

    storage = storage or Storage()
    table = open_table(path, storage.delta_options(path))
    if table is None:
        raise FileNotFoundError(f"no Delta table at {path}")
    return table_dataset(table, path, storage).to_table(columns=columns, filter=filter)
