"""``python -m spark_purgatory status|pending|at-risk|explain ...`` (see ``spark_purgatory.cli``)."""

import os
import sys

from .cli import main

if __name__ == "__main__":  # not on import (pytest's doctest collection imports every module)
    code = main()
    pyspark = sys.modules.get("pyspark")
    if pyspark is None or pyspark.SparkContext._active_spark_context is None:
        # a JVM-free answer, all written: exit without the interpreter's finalisation, where a
        # native thread (pyarrow's or delta-rs's) once aborted the process after the output
        # ("terminate called without an active exception", exit -6 in a loaded test run)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
