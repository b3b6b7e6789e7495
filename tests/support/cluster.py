"""Real Spark processes on loopback for the distribution tests: a standalone cluster, a Connect server.

Both come from the pyspark package itself (``spark-class``, ``spark-submit`` and the bundled
Spark Connect JAR), so CI needs nothing beyond the project's own dependencies.  The Connect
server and the cluster's environment are ``testbed.services``' (the Connect benchmark
starts the same server).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from urllib.request import urlopen

from spark_purgatory.kafka_broker import free_port
from testbed.services import cluster_env, connect_server, spark_home, wait_for_port

__all__ = ["cluster_env", "connect_server", "free_port", "standalone_cluster"]


@contextlib.contextmanager
def standalone_cluster(workdir: str, cores: int = 2) -> Iterator[str]:
    """A standalone master and one worker of ``cores`` cores; yields the master URL.

    An application that asks one core an executor (``spark.executor.cores=1``) gets
    ``cores`` executors, each a JVM of its own: what a second worker would add is one more
    daemon JVM, which only launches executors."""
    os.makedirs(workdir, exist_ok=True)
    env = cluster_env(workdir)
    port, ui_port = free_port(), free_port()
    log = open(os.path.join(workdir, "cluster.log"), "w")  # noqa: SIM115 - closed below
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    processes = [
        subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    ]
    try:
        wait_for_port(port, processes[0], "the master")
        url = f"spark://127.0.0.1:{port}"
        processes.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--cores",
                    str(cores),
                    "--memory",
                    f"{cores}g",
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    str(free_port()),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        _wait_for_workers(ui_port, 1, processes)
        yield url
    finally:
        for p in reversed(processes):
            p.terminate()
        for p in processes:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()


def _wait_for_workers(
    ui_port: int, workers: int, processes: list[subprocess.Popen], timeout: float = 120
) -> None:
    """Until the master lists ``workers`` workers alive (its web UI's ``/json``), so the tests'
    applications get their executors at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = [p for p in processes if p.poll() is not None]
        if ended:
            raise RuntimeError(f"a cluster process exited with {ended[0].returncode}")
        with contextlib.suppress(OSError, ValueError):
            with urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as answer:
                state = json.load(answer)
            if sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE") >= workers:
                return
        time.sleep(0.2)
    raise TimeoutError(f"{workers} workers did not register with the master within {timeout} s")
