"""spark-purgatory's version, in one place.

``pyproject.toml`` reads it for the wheel's metadata (a dynamic version), and the code reads it
from here wherever the package runs: an installed wheel, a checkout, a wheel shipped with
``--py-files`` (where no package metadata may be found).  ``spark-purgatory --version`` prints
it; every commit to an output table records it (``USER_METADATA``, the commit info's
``userMetadata``).
"""

from __future__ import annotations

__all__ = ["__version__", "USER_METADATA"]

__version__ = "0.3.0.dev0"

#: what each commit of an output table records in its commit info's ``userMetadata`` (Delta's
#: field for a writer's note, shown by ``DESCRIBE HISTORY`` and delta-rs's ``history()``)
USER_METADATA = f"spark-purgatory/{__version__}"
