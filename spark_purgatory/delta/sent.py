"""``STAGED`` rows as a staging shard sends them to the driver: ``SENT``, a narrower frame.

A shard that stages its own output (``staging.ShardStaging``, ``start``'s path) returns its
``STAGED`` rows to Spark as the pandas frame ``applyInPandasWithState`` wants, and PySpark
converts that frame back to Arrow column by column, at a cost per column whatever its rows:
``STAGED``'s 28 columns cost a shard call more than anything else in that hand-over for its
two or three rows (a staged file's and its metrics row; docs/performance-history.md has the
figures).  So the rows travel in ``SENT``: the
columns the query's observed metrics read in Spark (``spark.metrics``: the table, the counts,
a call's shard, pending, input rows and watermark) as they are, and every other column of a
row in one text column, ``others``: a JSON object of its values that are not null.  The
driver widens the rows back to ``STAGED`` (``widened``) before anything reads them, so the
sink, its manifests and the staged files know only ``STAGED``.

Nothing of ``SENT`` is persisted: a micro-batch replayed after a restart is computed again by
the shards that run it, and its rows are sent as they send them.

Invariant: ``widened(as_sent(rows))`` is ``rows`` (``STAGED``'s values are whole numbers,
text or null, which JSON keeps exactly).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa

from .staging import STAGED

__all__ = ["SENT", "SENT_COLUMNS", "OTHERS", "as_sent", "widened"]

#: ``STAGED``'s columns ``SENT`` keeps as they are: what Spark reads of the rows
#: (``spark.metrics._observe_staged``)
SENT_COLUMNS: tuple[str, ...] = (
    "table",
    "rows",
    "completed",
    "expired",
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
    """``STAGED`` rows (dicts of Python values, a column missing as null) as the ``SENT``
    frame a shard call returns to Spark: one block of Python objects, as PySpark converts them
    (to their Arrow types, None as null), not inferred by pandas column by column (a few rows
    cost pandas more to infer than PySpark to convert, and one block is the cheapest frame for
    PySpark to take columns from)."""
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
