"""Real Spark processes on loopback for the distribution tests: a standalone cluster, a Connect server.

Both come from the pyspark package itself (``spark-class``, ``spark-submit`` and the bundled
Spark Connect JAR), so CI needs nothing beyond the project's own dependencies.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pyspark

SPARK_HOME = os.path.dirname(pyspark.__file__)
BIN = os.path.join(SPARK_HOME, "bin")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what} did not listen on port {port} within {timeout} s")


def cluster_env(workdir: str) -> dict[str, str]:
    """The environment of the cluster's processes and of a driver that uses it (``env=``).

    The executors start with the JVM options the tests give every other JVM (conftest's
    ``TEST_JVM_OPTIONS``, in ``SPARK_DAEMON_JAVA_OPTS`` for the master and workers): the
    workers build an executor's command from the application's
    ``spark.executor.extraJavaOptions``, which the driver reads from ``spark-defaults.conf`` in
    ``SPARK_CONF_DIR``.  With C2 and G1 the two executors spent a test's worth of CPU.
    """
    conf_dir = os.path.join(workdir, "conf")
    os.makedirs(conf_dir, exist_ok=True)
    with open(os.path.join(conf_dir, "spark-defaults.conf"), "w") as f:
        f.write(f"spark.executor.extraJavaOptions {os.environ.get('SPARK_DAEMON_JAVA_OPTS', '')}\n")
    return {
        **os.environ,
        "SPARK_HOME": SPARK_HOME,
        "SPARK_CONF_DIR": conf_dir,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": os.path.join(workdir, "work"),
        "SPARK_LOG_DIR": os.path.join(workdir, "logs"),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


@contextlib.contextmanager
def standalone_cluster(workdir: str, workers: int = 2) -> Iterator[str]:
    """A standalone master and ``workers`` one-core workers; yields the master URL."""
    os.makedirs(workdir, exist_ok=True)
    env = cluster_env(workdir)
    port = free_port()
    log = open(os.path.join(workdir, "cluster.log"), "w")  # noqa: SIM115 - closed below
    spark_class = os.path.join(BIN, "spark-class")
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
                str(free_port()),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    ]
    try:
        _wait_for_port(port, processes[0], "the master")
        url = f"spark://127.0.0.1:{port}"
        for _ in range(workers):
            processes.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        url,
                        "--cores",
                        "1",
                        "--memory",
                        "2g",
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
        time.sleep(5)  # workers register with the master
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


@contextlib.contextmanager
def connect_server(workdir: str, conf: dict[str, str] | None = None) -> Iterator[str]:
    """pyspark's bundled Spark Connect server (local[2]), with ``conf``'s Spark settings
    besides the ones below; yields the ``sc://`` URL."""
    os.makedirs(workdir, exist_ok=True)
    env = cluster_env(workdir)
    port = free_port()
    log = open(os.path.join(workdir, "connect.log"), "w")  # noqa: SIM115 - closed below
    jar = next(f for f in os.listdir(os.path.join(SPARK_HOME, "jars")) if f.startswith("spark-connect_"))
    server = subprocess.Popen(
        [
            os.path.join(BIN, "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master",
            "local[2]",
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            "spark.ui.enabled=false",  # no UI port to collide with a parallel test's
            "--conf",
            "spark.sql.shuffle.partitions=3",
            "--conf",
            "spark.sql.session.timeZone=UTC",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            *(arg for key, value in (conf or {}).items() for arg in ("--conf", f"{key}={value}")),
            os.path.join(SPARK_HOME, "jars", jar),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for_port(port, server, "the Spark Connect server", timeout=120)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
