"""The broker's process: one Kafka 4 node in KRaft mode, started from the pinned JARs.

Broker and controller in one JVM, on 127.0.0.1 only, with free ports and a data directory of
its own, started as Kafka's own scripts do::

    java -cp JARS kafka.tools.StorageTool format -t CLUSTER_ID -c server.properties --standalone
    java -cp JARS kafka.Kafka server.properties

With a ``data_dir`` given, the storage is formatted once and later starts run on it, on the
ports it was formatted with.

Invariant: a broker this module started does not outlive its owner (``stop()``, a ``with``
block, exit; on Linux the JVM dies with the process that started it even when killed),
unless asked by name: ``detached=True``.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from ..config import ConfigError
from ..runtime.jars import jar_paths
from .admin import BrokerClients, KafkaBrokerError
from .tls import BrokerCertificates, certificates_in

#: the listeners' names, which are their protocols' (the SASL ones listen only when asked for)
_LISTENERS = ("PLAINTEXT", "CONTROLLER", "SASL_PLAINTEXT", "SASL_SSL")
_PROTOCOLS = {"CONTROLLER": "PLAINTEXT"}
#: the ``jvm/`` set the broker runs from (``runtime.jars.jar_paths``)
BROKER_JARS = "kafka-broker"
#: a small heap and C1 only, as the tests' Spark JVMs: it takes little CPU from them
_JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
_START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
_PORT_ATTEMPTS = 3
#: the broker's process id in a kept ``data_dir`` (``stop_at`` and ``status`` read it)
PID_FILE = "broker.pid"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's ``Uuid``)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _address(port: int | None, missing: str) -> str:
    if port is None:
        raise KafkaBrokerError(missing)
    return f"127.0.0.1:{port}"


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGKILL this process when the process that started it dies (``PR_SET_PDEATHSIG``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def _reap_when_it_stops(process: subprocess.Popen) -> None:
    """Wait for a detached broker in a thread: stopped, it leaves no zombie behind, and its
    handle is never dropped while it runs."""
    threading.Thread(target=process.wait, name=f"kafka-broker-{process.pid}", daemon=True).start()


class KafkaBroker(BrokerClients):
    """One Kafka node (broker + KRaft controller) on 127.0.0.1, from the pinned JARs.

    Args:
        jars: the classpath; by default the ``kafka-broker`` set.
        data_dir: where its logs, configuration and data go; a temporary directory (removed
            by ``stop``) when None.
        java: the ``java`` executable; ``$JAVA_HOME/bin/java`` or ``java`` by default.
        properties: extra ``server.properties`` entries.
        detached: the broker outlives this process (``stop_at(data_dir)`` ends it).
        sasl: also a ``SASL_PLAINTEXT`` listener (``sasl_bootstrap_servers``) whose clients
            log in with SCRAM-SHA-256 as a user ``add_scram_user`` made.
        tls: also a ``SASL_SSL`` listener (``sasl_ssl_bootstrap_servers``): SCRAM-SHA-256
            over TLS, clients trusting ``certificates.ca_file``.
    """

    def __init__(
        self,
        jars: Sequence[str] | None = None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        java: str | None = None,
        properties: dict[str, str] | None = None,
        detached: bool = False,
        sasl: bool = False,
        tls: bool = False,
    ) -> None:
        self.detached = detached
        self.sasl = sasl
        self.tls = tls
        self.sasl_port: int | None = None
        self.sasl_ssl_port: int | None = None
        self.certificates: BrokerCertificates | None = None
        self._jars = list(jars) if jars is not None else None
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._java = java
        self._extra = dict(properties or {})
        self.port: int | None = None
        self.controller_port: int | None = None
        self._process: subprocess.Popen | None = None
        self._admin = None

    # -- starting ---------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for clients (``kafka.bootstrap.servers``)."""
        return _address(self.port, "the broker is not started")

    @property
    def sasl_bootstrap_servers(self) -> str:
        """``host:port`` of the SCRAM listener (``KafkaBroker(sasl=True)``)."""
        return _address(self.sasl_port, "the broker has no SASL listener (KafkaBroker(sasl=True))")

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """``host:port`` of the SCRAM-over-TLS listener (``KafkaBroker(tls=True)``)."""
        return _address(self.sasl_ssl_port, "the broker has no SASL_SSL listener (KafkaBroker(tls=True))")

    @property
    def log_file(self) -> Path:
        """The broker's own output (stdout and stderr of its JVM)."""
        assert self.data_dir is not None
        return self.data_dir / "broker.log"

    def start(self, timeout: float = _START_TIMEOUT_S) -> KafkaBroker:
        """Format the storage, start the JVM and wait until it serves clients.

        Raises:
            KafkaBrokerError: no Java, no JARs, or the broker did not come up within
                ``timeout`` seconds (the message ends with its log's last lines).
        """
        if self._process is not None:
            return self
        java, classpath = self._java_command(), self._classpath()
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="spark-purgatory-kafka-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.detached and self._own_dir:
            raise KafkaBrokerError("a detached broker needs a data_dir of its own (where it keeps its data)")
        if not self.detached:
            atexit.register(self.stop)
        for attempt in range(_PORT_ATTEMPTS):
            try:
                self._launch(java, classpath, timeout)
                if self.detached:
                    _reap_when_it_stops(self._process)
                return self
            except KafkaBrokerError as error:
                # a free port taken by another process before the JVM bound it: new ports
                taken = "Address already in use" in str(error)
                self._kill()
                if not taken or attempt == _PORT_ATTEMPTS - 1 or self.formatted_ports() is not None:
                    self.stop()
                    raise
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _launch(self, java: str, classpath: str, timeout: float) -> None:
        """Format a fresh storage for new ports, start the JVM, wait until it serves."""
        assert self.data_dir is not None
        config = self.data_dir / "server.properties"
        base = [java, *_JVM_OPTIONS, f"-Dlog4j2.configurationFile={self._log4j()}", "-cp", classpath]
        kept = self.formatted_ports()
        fresh = kept is None
        if kept is None:  # new ports (a kept storage's quorum voter is recorded with its ports)
            shutil.rmtree(self.data_dir / "logs", ignore_errors=True)
            kept = {name: free_port() for name in _LISTENERS[:2]}
            kept.update({"SASL_PLAINTEXT": free_port()} if self.sasl else {})
            kept.update({"SASL_SSL": free_port()} if self.tls else {})
        self.port, self.controller_port = kept["PLAINTEXT"], kept["CONTROLLER"]
        self.sasl_port, self.sasl_ssl_port = kept.get("SASL_PLAINTEXT"), kept.get("SASL_SSL")
        if self.sasl_ssl_port is not None:  # made at the first start, kept with the data
            self.certificates = certificates_in(self.data_dir)
        if fresh:
            config.write_text("".join(f"{k}={v}\n" for k, v in self._properties().items()))
            # "--cluster-id=ID": an id may begin with "-", which argparse4j would take for an option
            fmt = [
                *base,
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={_cluster_id()}",
                "-c",
                str(config),
            ]
            formatted = subprocess.run(
                [*fmt, "--standalone"], capture_output=True, text=True, timeout=timeout
            )
            if formatted.returncode != 0:
                raise KafkaBrokerError(
                    f"kafka.tools.StorageTool format failed ({formatted.returncode}): "
                    f"{(formatted.stdout + formatted.stderr).strip()[-2000:]}"
                )
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                [*base, "kafka.Kafka", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in a terminal goes to us, and we stop it
                # the parent-death signal follows the starting *thread*: start from one that lives
                preexec_fn=die_with_parent
                if sys.platform.startswith("linux") and not self.detached
                else None,
            )
        self._wait_until_serving(timeout)
        if not self._own_dir:
            (self.data_dir / PID_FILE).write_text(f"{self._process.pid}\n")

    def formatted_ports(self) -> dict[str, int] | None:
        """The ports of a storage formatted before in a kept ``data_dir``, by listener name;
        None for a new directory (or one this module did not format)."""
        assert self.data_dir is not None
        config = self.data_dir / "server.properties"
        if (
            self._own_dir
            or not (self.data_dir / "logs" / "meta.properties").is_file()
            or not config.is_file()
        ):
            return None
        entries = dict(
            line.split("=", 1)
            for line in config.read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )
        try:
            listeners = dict(a.split("://", 1) for a in entries["listeners"].split(","))
            return {name: int(address.rsplit(":", 1)[1]) for name, address in listeners.items()}
        except (KeyError, ValueError, IndexError):
            return None

    def _kill(self) -> None:
        """End the JVM at once (a failed start), keeping the data directory."""
        process, self._process = self._process, None
        self._admin = None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def _java_command(self) -> str:
        home = os.environ.get("JAVA_HOME")
        candidates = [self._java] if self._java else [*([f"{home}/bin/java"] if home else []), "java"]
        for candidate in candidates:
            found = shutil.which(candidate) if candidate else None
            if found:
                return found
        raise KafkaBrokerError(
            "the Kafka broker needs Java 17 or newer: install a JDK (Debian: apt-get install "
            "openjdk-17-jre-headless) or set JAVA_HOME"
        )

    def _classpath(self) -> str:
        jars = self._jars
        if jars is None:
            try:  # make jars' set, else the user cache's, resolved on first use
                jars = jar_paths(BROKER_JARS, resolve=True)
            except ConfigError as error:
                raise KafkaBrokerError(f"no Kafka broker JARs: {error}") from None
        if not any(Path(j).name.startswith("kafka_2.13-") for j in jars):
            raise KafkaBrokerError(f"no Kafka broker JARs (org.apache.kafka:kafka_2.13) among {jars}")
        return os.pathsep.join(jars)

    def _properties(self) -> dict[str, str]:
        assert self.data_dir is not None
        ports = {"PLAINTEXT": self.port, "SASL_PLAINTEXT": self.sasl_port, "SASL_SSL": self.sasl_ssl_port}
        # SCRAM users are kept in the cluster's metadata, for both SASL listeners
        clients = [f"{name}://127.0.0.1:{port}" for name, port in ports.items() if port is not None]
        tls = {}
        if self.certificates is not None:
            tls = {
                "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
                "listener.name.sasl_ssl.ssl.keystore.location": str(self.certificates.keystore_file),
            }
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "listeners": ",".join([*clients, f"CONTROLLER://127.0.0.1:{self.controller_port}"]),
            "advertised.listeners": ",".join(clients),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(f"{n}:{_PROTOCOLS.get(n, n)}" for n in _LISTENERS),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            **{
                f"listener.name.{name}.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
                for name in ("sasl_plaintext", "sasl_ssl")
            },
            **tls,
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            # one node: every internal topic with one replica
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            # a transactional producer's first call waits until this log's partitions are
            # loaded (50 by default); one node needs one
            "transaction.state.log.num.partitions": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # a deleted topic stays deleted (a reader's metadata request would recreate it)
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            **self._extra,
        }

    def _log4j(self) -> Path:
        """Log4j 2 configuration: INFO to the JVM's stdout, which goes to ``log_file``."""
        assert self.data_dir is not None
        path = self.data_dir / "log4j2.properties"
        path.write_text(
            "rootLogger.level = INFO\nrootLogger.appenderRef.out.ref = OUT\n"
            "appender.out.type = Console\nappender.out.name = OUT\n"
            "appender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            # the state change and request loggers say a line per partition and request
            "logger.kafka.name = kafka\nlogger.kafka.level = WARN\n"
            "logger.state.name = state.change.logger\nlogger.state.level = WARN\n"
            "logger.server.name = kafka.server.KafkaRaftServer\nlogger.server.level = INFO\n"
        )
        return path

    def _wait_until_serving(self, timeout: float) -> None:
        """Until the broker answers a metadata request."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise KafkaBrokerError(
                    f"the Kafka broker exited with {self._process.returncode} while starting:\n"
                    f"{self.log_tail()}"
                )
            if self._serving():
                return
            time.sleep(0.2)
        raise KafkaBrokerError(f"the Kafka broker did not serve within {timeout:.0f} s:\n{self.log_tail()}")

    def _serving(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        try:
            self.admin().list_topics(timeout=5)
        except Exception:  # noqa: BLE001 - not ready yet: the next look decides
            return False
        return True

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the broker's log (what a failure message shows)."""
        if self.data_dir is None or not self.log_file.exists():
            return "(no broker log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    # -- stopping ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP) until ``resume``: its connections stay open, requests
        time out."""
        if self.running:
            os.killpg(self._process.pid, signal.SIGSTOP)  # type: ignore[union-attr]

    def resume(self) -> None:
        """Let a paused broker answer again (SIGCONT)."""
        if self.running:
            os.killpg(self._process.pid, signal.SIGCONT)  # type: ignore[union-attr]

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 15 s) and remove a data directory it made."""
        process, self._process = self._process, None
        self._admin = None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        atexit.unregister(self.stop)
        if not self._own_dir and self.data_dir is not None:
            (self.data_dir / PID_FILE).unlink(missing_ok=True)
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
