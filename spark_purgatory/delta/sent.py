"""``STAGED`` rows as a staging shard sends them to the driver: ``SENT``, a narrower frame.

PySpark converts a shard's pandas output back to Arrow at a cost per column, so the few
``STAGED`` rows travel in ``SENT``: the columns Spark's observed metrics read as they are,
the rest in one JSON text column, ``others``.  The driver widens them back (``widened``).

Invariant: ``widened(as_sent(rows))`` is ``rows`` (``STAGED``'s values are whole numbers,
text or null, which JSON keeps exactly).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa

from .staging import STAGED

#: ``STAGED``'s columns ``SENT`` keeps as they are: what Spark's observed metrics read
SENT_COLUMNS: tuple[str, ...] = (
    "table",
    "rows",
    "completed",
    "expired",
    "cancelled",
    "shard",
    "pending",
    "group_rows",
    "watermark_ms",
)
#: the column of a row's other values (a JSON object of those not null)
OTHERS = "others"
SENT = pa.schema([*(STAGED.field(name) for name in SENT_COLUMNS), (OTHERS, pa.string())])

_KEPT = frozenset(SENT_COLUMNS)
_COMPACT = (",", ":")


def as_sent(rows: list[dict]) -> pd.DataFrame:
    """``STAGED`` rows (dicts, a column missing as null) as the ``SENT`` frame a shard call
    returns to Spark: one block of Python objects, which PySpark converts itself, rather
    than columns pandas would infer one by one."""
    values = np.empty((len(rows), len(SENT)), dtype=object)
    for i, row in enumerate(rows):  # a few rows: a call's staged files and its metrics row
        values[i, :-1] = [row.get(name) for name in SENT_COLUMNS]
        values[i, -1] = _others(row)
    return pd.DataFrame(values, columns=SENT.names, copy=False)


def _others(row: dict) -> str:
    """A row's values ``SENT`` does not keep as columns, those not null, as a JSON object."""
    return json.dumps({k: v for k, v in row.items() if k not in _KEPT and v is not None}, separators=_COMPACT)


def widened(rows: pa.Table) -> pa.Table:
    """``SENT`` rows back as ``STAGED`` (the driver's side)."""
    kept = rows.select(list(SENT_COLUMNS)).to_pylist()
    others = rows.column(OTHERS).to_pylist()
    whole = [{**json.loads(text), **row} if text else row for row, text in zip(kept, others, strict=True)]
    return pa.Table.from_pylist(whole, schema=STAGED)
