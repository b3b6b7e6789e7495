"""Spark's log lines that a user of ``start()`` cannot act on, filtered out of the driver's log.

``UNACTIONABLE``: WARN lines true of every purgatory query that ask nothing of the reader.
``quiet_refusal``: the "terminated with error" of a micro-batch the driver's step refused
because its handle was stopping, though nothing failed.

Invariant: only the messages listed in ``UNACTIONABLE`` are dropped, and the line of a run
its handle is stopping; every other line is printed as before.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ..checkpoint_paths import Checkpoint, base_name

log = logging.getLogger(__name__)

#: the wake directory's name (``handoff.wake``) in a path Spark logs (no character a regular
#: expression reads otherwise)
_WAKE = base_name(Checkpoint("chk").wake)
#: the messages dropped, as regular expressions over the whole formatted message
UNACTIONABLE: tuple[str, ...] = (
    r".*The state for version \d+ doesn't exist in loadedMaps.*",
    r".*spark\.sql\.adaptive\.enabled is not supported in streaming DataFrames/Datasets.*",
    r".*Disabling AQE since AQE is not supported in stateful workloads.*",
    r".*Truncated the string representation of a plan since it was too large.*",
    r".*Assume no metadata directory\. Error while looking for metadata directory in the path: "
    rf"\S*/{_WAKE}/.*",
    rf".*The directory \S*/{_WAKE}/\S* was not found\. Was it deleted very recently\?.*",
)
#: marks the JVM whose log4j2 configuration has the filters (a system property)
_MARK = "spark.purgatory.quietLogs"


def quiet_spark_logs(spark: Any) -> bool:
    """Filter ``UNACTIONABLE`` out of the driver JVM's log (idempotent, a classic session only,
    never fails); True when the filters are in place."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        system = jvm.java.lang.System
        if system.getProperty(_MARK) == "true":
            return True
        _deny(jvm, spark.sparkContext._gateway, UNACTIONABLE)
        system.setProperty(_MARK, "true")
        return True
    except Exception:  # noqa: BLE001 - another logging backend: Spark's lines stay as they are
        log.debug("could not filter Spark's log", exc_info=True)
        return False


def quiet_refusal(query: Any) -> None:
    """Drop the "terminated with error" line of ``query``'s run (module docstring), in this
    process's driver JVM; never fails."""
    try:
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is None:  # Spark Connect: no driver JVM here
            return
        run = re.escape(f"[id = {query.id}, runId = {query.runId}]")
        _deny(context._jvm, context._gateway, (rf".*Query .*{run} terminated with error.*",))
    except Exception:  # noqa: BLE001 - another logging backend: the line stays
        log.debug("could not filter the stopping run's line", exc_info=True)


def _deny(jvm: Any, gateway: Any, patterns: tuple[str, ...]) -> None:
    """One log4j2 ``RegexFilter`` per pattern on the root logger: DENY on a match."""
    core = jvm.org.apache.logging.log4j.core
    result = getattr(core, "Filter$Result")
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    root = context.getConfiguration().getRootLogger()
    flags = gateway.new_array(jvm.java.lang.String, 1)
    flags[0] = "DOTALL"
    regex = core.filter.RegexFilter
    for pattern in patterns:
        root.addFilter(regex.createFilter(pattern, flags, False, result.DENY, result.NEUTRAL))
    context.updateLoggers()
