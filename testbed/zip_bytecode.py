"""Bytecode inside pyspark's ``pyspark.zip``, which Spark's Python workers import pyspark from.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' path, and the
archive holds sources only: every worker daemon compiled the pyspark modules it imports again
(about 0.5 s of CPU each, a job run's daemon and its forked workers about 0.9 s).  Python's
``zipimport`` reads a ``module.pyc`` stored beside ``module.py`` in the archive; written here
as unchecked-hash bytecode (PEP 552), so no timestamp is compared.  ``make bytecode`` runs it on
the dev venv; an archive that already holds bytecode is left as it is, and a reinstall of
pyspark brings the plain one back.  The workers import the same sources: only their compiled
form is stored.

    python -m testbed.zip_bytecode        # the running interpreter's pyspark
"""

from __future__ import annotations

import os
import py_compile
import tempfile
import zipfile
from importlib.util import find_spec


def archive() -> str:
    """The ``pyspark.zip`` of the pyspark this interpreter imports."""
    spec = find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "pyspark is not installed"
    return os.path.join(os.path.dirname(spec.origin), "python", "lib", "pyspark.zip")


def add_bytecode(path: str) -> int:
    """Rewrite ``path`` with a ``.pyc`` beside each ``.py`` (the same members, stored); how many
    were added (0: it held them already)."""
    with zipfile.ZipFile(path) as source:
        names = set(source.namelist())
        sources = [n for n in names if n.endswith(".py")]
        if any(f"{n}c" in names for n in sources):
            return 0
        added = 0
        with tempfile.TemporaryDirectory() as work:
            fd, staged = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".zip")
            os.close(fd)
            with zipfile.ZipFile(staged, "w", zipfile.ZIP_STORED) as out:
                for info in source.infolist():
                    data = source.read(info)
                    out.writestr(info, data)
                    if not info.filename.endswith(".py"):
                        continue
                    py = os.path.join(work, "m.py")
                    with open(py, "wb") as f:
                        f.write(data)
                    try:
                        py_compile.compile(
                            py, cfile=f"{py}c", dfile=info.filename, doraise=True,
                            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                        )  # fmt: skip
                    except py_compile.PyCompileError:  # left to be compiled when imported
                        continue
                    with open(f"{py}c", "rb") as f:
                        out.writestr(zipfile.ZipInfo(f"{info.filename}c", info.date_time), f.read())
                    added += 1
    os.replace(staged, path)
    return added


if __name__ == "__main__":
    where = archive()
    if added := add_bytecode(where):
        print(f"{where}: {added} modules' bytecode added")
