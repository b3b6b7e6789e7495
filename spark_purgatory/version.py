"""spark-purgatory's version, in one place.

``pyproject.toml`` reads it for the wheel's metadata, and the code reads it from here wherever
the package runs, also with ``--py-files`` (where no package metadata may be found).
"""

from __future__ import annotations

__version__ = "0.3.0.dev0"

#: what each commit of an output table records in its commit info's ``userMetadata`` (Delta's
#: field for a writer's note, shown by ``DESCRIBE HISTORY`` and delta-rs's ``history()``)
USER_METADATA = f"spark-purgatory/{__version__}"
