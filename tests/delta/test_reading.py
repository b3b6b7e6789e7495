"""Reading the output tables with delta-rs, then exiting: ``spark_purgatory.read_table``.

``DeltaTable(path).to_pandas()`` reads through delta-rs's Python filesystem handler, so
Arrow's I/O threads call into Python, and a call still in flight when the interpreter
finalizes aborts the process ("terminate called without an active exception", exit 134,
now and then: ``delta.reading``).  ``read_table`` reads through pyarrow's own filesystem:
twenty fresh interpreters that read four tables and exit must all exit 0.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.dataset as pads
from deltalake import DeltaTable, write_deltalake

from spark_purgatory import read_table

_SCRIPT = """
import sys
from spark_purgatory import read_table
for name in ("outcomes", "unmatched_events", "rejected", "metrics"):
    assert read_table(sys.argv[1] + "/" + name).to_pandas()["n"].sum() == 105
"""


def _tables(root) -> str:
    for name in ("outcomes", "unmatched_events", "rejected", "metrics"):
        for part in range(3):  # a few files each, as a stream leaves them
            rows = pa.table({"n": list(range(part * 5, part * 5 + 5)), "s": ["x"] * 5})
            write_deltalake(str(root / name), rows, mode="append")
    return str(root)


def test_read_table_gives_the_rows_delta_rs_gives(tmp_path):
    root = _tables(tmp_path)
    path = os.path.join(root, "outcomes")
    assert read_table(path).sort_by("n").equals(DeltaTable(path).to_pyarrow_table().sort_by("n"))
    assert read_table(path, columns=["n"], filter=pads.field("n") >= 10).column("n").to_pylist() == [
        10, 11, 12, 13, 14,
    ]  # fmt: skip


def test_twenty_fresh_interpreters_read_four_tables_and_exit_cleanly(tmp_path):
    root = _tables(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    codes = [
        subprocess.run(
            [sys.executable, "-c", _SCRIPT, root], env=env, capture_output=True, text=True, timeout=120
        )
        for _ in range(20)
    ]
    assert [(c.returncode, c.stderr[-300:]) for c in codes if c.returncode != 0] == []
