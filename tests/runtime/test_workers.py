"""``runtime.workers.end_python_workers``: the local Python workers' daemon is ended before
the JVM's exit stops the context, so that a clean stop prints no worker's traceback (the
crash tests' signal runs check the job's stderr as a whole)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from spark_purgatory.runtime.workers import _end_daemons, end_python_workers

_SLEEP = "import time; time.sleep(60)"


def test_only_this_processs_pyspark_daemons_are_sent_sigterm():
    daemon = subprocess.Popen([sys.executable, "-c", _SLEEP, "-m", "pyspark.daemon", "pyspark.worker"])
    other = subprocess.Popen([sys.executable, "-c", _SLEEP, "pyspark.worker"])
    try:
        assert _end_daemons(os.getpid()) == [daemon.pid]
        assert daemon.wait(timeout=10) == -signal.SIGTERM
        assert other.poll() is None  # not a daemon: left running
        assert _end_daemons(other.pid) == []  # nobody's parent: nothing ended
    finally:
        for process in (daemon, other):
            process.kill()
            process.wait()


def test_no_context_or_a_cluster_is_nothing_to_end():
    assert end_python_workers(None) == []  # no context (Spark Connect, or never started)

    class Cluster:  # a cluster's workers are its executors': not this driver's to end
        master = "spark://host:7077"

    assert end_python_workers(Cluster()) == []


def test_start_has_the_workers_ended_once_when_the_interpreter_exits():
    """``end_python_workers_at_exit`` (called by every ``start``): at the interpreter's exit,
    once however often it was called, with the context then active; a script that ends after
    ``start()``'s block without ``spark.stop()`` prints no worker's ``BrokenPipeError``."""
    script = "\n".join(
        [
            "import pyspark",
            "from spark_purgatory.runtime import workers",
            "workers.end_python_workers = lambda sc: print('ended', sc)",
            "workers.end_python_workers_at_exit()",
            "workers.end_python_workers_at_exit()",
            "pyspark.SparkContext._active_spark_context = 'the-context'",
            "print('exiting')",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split("\n") == ["exiting", "ended the-context", ""]
