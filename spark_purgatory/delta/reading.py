"""Reading the output tables with delta-rs in a process that then exits cleanly: ``read_table``.

``DeltaTable(path).to_pandas()`` reads through delta-rs's Python filesystem handler, whose
calls from Arrow's threads can abort the process at exit (docs/troubleshooting.md); pyarrow's
own filesystems (``Storage.filesystem``) keep Python out of Arrow's threads.

Invariant: the rows are those of ``DeltaTable(path).to_pyarrow_table()``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from ..storage import Storage


def table_dataset(table: Any, path: str, storage: Storage | None = None) -> pads.Dataset:
    """``table`` (a ``DeltaTable`` at ``path``) as a dataset read through pyarrow's own filesystem."""
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
