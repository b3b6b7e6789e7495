"""A synthetic format change, for the tests of ``spark-purgatory upgrade`` (no format needs one today).

``bumped(ran)``: while it holds, this version writes ``checkpoint-files`` 2 and reads nothing
older, and the migration step 1 -> 2 (``upgrade.MIGRATIONS``) writes
``<checkpoint>/purgatory-synthetic`` whole (idempotent, as a step must be) and notes each of
its runs in the file ``ran``.  A checkpoint written before it (any real one) then needs the
upgrade.  ``python -m tests.support.format_bump CHECKPOINT RAN`` runs ``spark-purgatory
upgrade`` under it, in a process a ``PURGATORY_UPGRADE_FAULT`` may kill.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from unittest import mock

from spark_purgatory import upgrade
from spark_purgatory.state import versions
from spark_purgatory.storage import Storage, write_whole

SYNTHETIC = "purgatory-synthetic"
FORMAT = "checkpoint-files"


@contextlib.contextmanager
def bumped(ran: Path) -> Iterator[None]:
    def migrate(checkpoint: str, storage: Storage, _config) -> None:
        with ran.open("a") as out:
            out.write("migrated\n")
        fs, root = storage.filesystem(checkpoint)
        write_whole(fs, f"{root}/{SYNTHETIC}", lambda out: out.write(b"checkpoint-files 2"))

    newer = replace(versions.FORMATS[FORMAT], version=2, reads_since=2)
    with (
        mock.patch.dict(versions.FORMATS, {FORMAT: newer}),
        mock.patch.dict(upgrade.MIGRATIONS, {(FORMAT, 1): migrate}),
    ):
        yield


if __name__ == "__main__":
    from spark_purgatory.cli import main

    with bumped(Path(sys.argv[2])):
        code = main(["upgrade", "--checkpoint", sys.argv[1]])
    sys.exit(code)
