"""spark-purgatory streaming job (entry point for ``python`` and ``spark-submit``).

    python jobs/purgatory_job.py --ops-path DIR --events-path DIR \
        (--output-path DIR | --output-tables SCHEMA) --checkpoint-path DIR \
        [--source-format json|parquet|delta|kafka] \
        [--trigger available-now|processing-time=10s] [--conf FILE] [--set KEY=VALUE ...]

Everything lives in ``spark_purgatory.job``; see its docstring or ``--help``.  Under
``spark-submit`` on a cluster, ship the wheel under a ``.zip`` name with ``--py-files`` (PySpark puts
only ``.zip``, ``.egg`` and ``.jar`` files on the executors' path; docs/deployment.md).
"""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
if os.path.isdir(os.path.join(ROOT, "spark_purgatory")) and ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # running from a checkout

from spark_purgatory.job import console  # noqa: E402

if __name__ == "__main__":
    sys.exit(console())
