"""Servers on loopback the tests and the benchmarks run beside the job: an S3-compatible
object store (``S3Store``, moto's server), a fault-injecting proxy in front of
it (``FaultyProxy``) and pyspark's Spark Connect server (``connect_server``).

Each comes from the project's own dependencies (moto, pyspark's bundled Connect JAR), so CI
needs nothing more; each binds a free port on 127.0.0.1.

**The store.** ``S3Store()`` starts ``moto.server.ThreadedMotoServer`` on 127.0.0.1 and creates a
bucket; the project reaches it the way a user reaches MinIO or S3: our ``storage.*`` keys
(``settings``) for the endpoint, the standard AWS variables (``env``) for the credentials.
``storage_options`` are delta-rs's, to read the tables back.

**The proxy.** ``FaultyProxy(store.endpoint)`` forwards every request to the server as it came
(method, path, headers, body: a signed request stays valid) and answers what the server
answered, unless it is told to misbehave, as S3 itself does:

* ``slow_down(rate)``: that share of the requests (drawn from a seeded generator) is answered
  ``503 SlowDown`` ("Please reduce your request rate.") and never reaches the server, as S3
  answers a request rate it is scaling up for.  A transient fault: the client is expected to
  retry (``storage.retries``, Spark's ``fs.s3a.*`` retry keys: ``docs/operating.md``).
* ``gone(bucket)``: every request about that bucket is answered ``404 NoSuchBucket`` ("The
  specified bucket does not exist"), as S3 answers once a bucket is deleted; ``revoked()``:
  every request is answered ``403 InvalidAccessKeyId``, as S3 answers revoked credentials.
  Permanent faults: no retry helps.  ``gone_after(bucket, request)`` lets the bucket go right
  after the first forwarded request ``request(method, path)`` accepts (a moment in a run).
* ``heal()``: forward everything again (the bucket restored with what it held, the
  credentials given back).

From a client's side this is the store itself: it sees S3's own answers, status and XML body,
whatever the client (delta-rs's ``object_store``, pyarrow's AWS SDK for C++, Spark's S3A on
the AWS SDK for Java).  ``injected`` counts the faults given, by client (from its
``User-Agent``: ``delta-rs``, ``pyarrow``, ``s3a``, ``other``), so a caller can tell that each
writer met them.

The proxy runs in a process of its own (``python -m testbed.services``), told what to do
through requests to ``/_faulty/...`` on its own port: a client that holds the GIL while it
waits for the store (delta-rs's ``alter.set_table_properties`` does) would otherwise stop a
proxy in the caller's process from answering it.  For the same reason the store behind it runs
in its own process too (``S3Store(own_process=True)``) when the job runs in the caller's.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import http.client
import json
import logging
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlencode, urlsplit
from urllib.request import urlopen

if TYPE_CHECKING:  # the package is imported where it is used: the proxy's process runs without it
    from spark_purgatory.storage import Storage

ROOT = Path(__file__).resolve().parent.parent

# -- the object store ------------------------------------------------------------------------------

BUCKET = "purgatory"  # S3 bucket names need 3+ characters
REGION = "us-east-1"
#: what a user exports: fake credentials (moto accepts any) and the region
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION}


class S3Store:
    """moto's S3 server on loopback with one bucket; ``stop()`` it when done.

    ``own_process``: the server runs in a process of its own (``python -m moto.server``), not
    in a thread of this one: needed when this process also runs a client that holds the GIL
    while it waits for the store (delta-rs's ``alter.set_table_properties``, which the job
    calls at start), which would stop a server thread from answering it.
    """

    def __init__(self, bucket: str = BUCKET, *, own_process: bool = False) -> None:
        import boto3

        self._process: subprocess.Popen | None = None
        if own_process:
            self.endpoint = self._start_process()
        else:
            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
            self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self.server.start()
            host, port = self.server.get_host_and_port()
            self.endpoint = f"http://{host}:{port}"
        self.server_endpoint = self.endpoint  # the caller's own look (keys, put): never through a proxy
        self.bucket = bucket
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"],
        )
        client.create_bucket(Bucket=bucket)

    def _start_process(self) -> str:
        from spark_purgatory.kafka_broker import die_with_parent, free_port

        port = free_port()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self._process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return f"http://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.1)
        self._process.kill()
        raise RuntimeError(f"moto's server did not listen on port {port}")

    def via(self, endpoint: str) -> S3Store:
        """The same store reached through another address (``faulty_proxy.FaultyProxy``'s):
        ``settings``, ``storage`` and ``storage_options`` (what the project is given) name it;
        the caller's own ``keys`` and ``put`` still talk to the server itself."""
        other = copy.copy(self)
        other.endpoint = endpoint
        return other

    def uri(self, *parts: str, scheme: str = "s3") -> str:
        return "/".join([f"{scheme}://{self.bucket}", *parts])

    @property
    def env(self) -> dict[str, str]:
        return dict(ENV)

    @property
    def settings(self) -> dict[str, str]:
        """Our ``storage.*`` keys for this store (as ``--set`` or a conf file would give them)."""
        return {"storage.endpoint": self.endpoint, "storage.region": REGION, "storage.allow.http": "true"}

    @property
    def storage(self) -> Storage:
        from spark_purgatory.storage import Storage

        return Storage(endpoint=self.endpoint, region=REGION, allow_http=True)

    @property
    def storage_options(self) -> dict[str, str]:
        """delta-rs's options to read a table back (credentials included: no environment needed)."""
        options = self.storage.delta_options(self.uri()) or {}
        return {**options, "AWS_ACCESS_KEY_ID": ENV["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": "testing"}

    def _fs(self):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            endpoint_override=self.server_endpoint,
            scheme="http",
            region=REGION,
            access_key=ENV["AWS_ACCESS_KEY_ID"],
            secret_key=ENV["AWS_SECRET_ACCESS_KEY"],
        )

    def keys(self, prefix: str = "") -> list[str]:
        """The object keys under ``prefix`` (to check what was written where)."""
        import pyarrow.fs as pafs

        where = f"{self.bucket}/{prefix}".rstrip("/")
        selector = pafs.FileSelector(where, recursive=True, allow_not_found=True)
        return sorted(
            i.path[len(self.bucket) + 1 :]
            for i in self._fs().get_file_info(selector)
            if i.type == pafs.FileType.File
        )

    def put(self, key: str, data: bytes) -> None:
        """One object (input written by someone else: it appears whole, as S3 objects do)."""
        with self._fs().open_output_stream(f"{self.bucket}/{key}") as out:
            out.write(data)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(30)
        else:
            self.server.stop()


# -- the fault-injecting proxy ---------------------------------------------------------------------

#: headers that belong to one connection, not to the request (RFC 9110, 7.6.1)
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
}
#: S3's answers for the faults (status, code, message)
SLOW_DOWN = (503, "SlowDown", "Please reduce your request rate.")
NO_SUCH_BUCKET = (404, "NoSuchBucket", "The specified bucket does not exist")
INVALID_ACCESS_KEY = (
    403,
    "InvalidAccessKeyId",
    "The AWS Access Key Id you provided does not exist in our records.",
)


def client_of(user_agent: str) -> str:
    """Which client sent a request, from its ``User-Agent``.

    >>> client_of("object_store/0.12.3"), client_of("aws-sdk-cpp/1.11.488 ...")
    ('delta-rs', 'pyarrow')
    >>> client_of("Hadoop 3.4.1, aws-sdk-java/2.29"), client_of("Boto3/1.40")
    ('s3a', 'other')
    """
    agent = user_agent.lower()
    if "object_store" in agent:
        return "delta-rs"
    if "aws-sdk-cpp" in agent:
        return "pyarrow"
    if "hadoop" in agent or "aws-sdk-java" in agent:
        return "s3a"
    return "other"


class FaultyProxy:
    """The proxy in a process of its own, in front of ``target`` (module docstring);
    ``endpoint`` is its address, ``stop()`` it when done."""

    def __init__(self, target: str, *, seed: int = 0) -> None:
        from spark_purgatory.kafka_broker import die_with_parent

        self._process = subprocess.Popen(
            [sys.executable, "-m", "testbed.services", "--target", target, "--seed", str(seed)],
            cwd=ROOT,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            },
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
        )
        line = self._process.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("port "):
            self._process.kill()
            raise RuntimeError(f"the faulty proxy did not start: {line!r}")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"

    def _tell(self, command: str, **query: object) -> dict:
        url = f"{self.endpoint}/_faulty/{command}?{urlencode(query)}"
        with urlopen(url, timeout=30) as answer:
            return json.loads(answer.read())

    def slow_down(self, rate: float) -> None:
        """Answer ``rate`` of the requests with ``503 SlowDown`` from now on."""
        self._tell("slow_down", rate=rate)

    def gone(self, bucket: str) -> None:
        """Answer every request about ``bucket`` with ``404 NoSuchBucket`` from now on."""
        self._tell("gone", bucket=bucket)

    def gone_after(self, bucket: str, method: str, path: str) -> None:
        """Let ``bucket`` go right after the first ``method`` request whose path holds ``path``
        has been forwarded (and answered)."""
        self._tell("gone_after", bucket=bucket, method=method, path=path)

    def revoked(self) -> None:
        """Answer every request with ``403 InvalidAccessKeyId`` from now on."""
        self._tell("revoked")

    def heal(self) -> None:
        """Forward everything again."""
        self._tell("heal")

    @property
    def injected(self) -> Counter[str]:
        """The faults given so far, by client."""
        return Counter(self._tell("counts")["injected"])

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(30)
        self._process.stdout.close()  # type: ignore[union-attr]


class _Faults:
    """The proxy's state and its forwarding, in the proxy's process."""

    def __init__(self, target: str, seed: int) -> None:
        parts = urlsplit(target)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.injected: Counter[str] = Counter()
        self.forwarded: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._rate = 0.0
        self._gone: str | None = None
        self._revoked = False
        self._trigger: tuple[str, str, str] | None = None  # bucket, method, part of the path

    # -- what it is told (``FaultyProxy``'s methods) ----------------------------------------------

    def slow_down(self, rate: float) -> None:
        with self._lock:
            self._rate = rate

    def gone(self, bucket: str) -> None:
        with self._lock:
            self._gone = bucket

    def gone_after(self, bucket: str, method: str, path: str) -> None:
        with self._lock:
            self._trigger = (bucket, method, path)

    def revoked(self) -> None:
        with self._lock:
            self._revoked = True

    def heal(self) -> None:
        with self._lock:
            self._rate, self._gone, self._revoked, self._trigger = 0.0, None, False, None

    # -- what it does ----------------------------------------------------------------------------

    def fault_for(self, method: str, path: str, client: str) -> tuple[int, str, str] | None:
        """The answer a request gets instead of the server's (None: forward it)."""
        bucket = path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
        with self._lock:
            if self._revoked:
                fault = INVALID_ACCESS_KEY
            elif self._gone is not None and bucket == self._gone:
                fault = NO_SUCH_BUCKET
            elif self._rate and self._random.random() < self._rate:
                fault = SLOW_DOWN
            else:
                return None
            self.injected[client] += 1
            return fault

    def forwarded_one(self, method: str, path: str, client: str) -> None:
        with self._lock:
            self.forwarded[client] += 1
            if self._trigger is not None and method == self._trigger[1] and self._trigger[2] in path:
                self._gone, self._trigger = self._trigger[0], None

    def forward(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes):
        """Send the request on to the server: its status, headers and body."""
        connection = http.client.HTTPConnection(*self.target, timeout=120)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                connection.putheader(name, value)
            if body or method in ("PUT", "POST"):
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body or None)
            response = connection.getresponse()
            data = response.read()
            return response.status, response.getheaders(), data
        finally:
            connection.close()

    def control(self, command: str, query: dict[str, str]) -> dict:
        """A request to ``/_faulty/<command>``: do it; the counts."""
        if command == "slow_down":
            self.slow_down(float(query["rate"]))
        elif command == "gone":
            self.gone(query["bucket"])
        elif command == "gone_after":
            self.gone_after(query["bucket"], query["method"], query["path"])
        elif command == "revoked":
            self.revoked()
        elif command == "heal":
            self.heal()
        with self._lock:
            return {"injected": dict(self.injected), "forwarded": dict(self.forwarded)}


def error_body(code: str, message: str, bucket: str) -> bytes:
    """S3's XML error document."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message><BucketName>{bucket}</BucketName>"
        "<RequestId>faulty-proxy</RequestId><HostId>faulty-proxy</HostId></Error>"
    ).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # the clients open many connections at once (delta-rs, pyarrow's thread pool): the default
    # backlog drops their connection attempts, which then wait for TCP's retransmissions
    request_queue_size = 1024

    def handle_error(self, request, client_address) -> None:
        pass  # a client gone mid-request (a job killed with kill -9): nothing to tell


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and "Expect: 100-continue" answered

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _any(self) -> None:
        proxy: _Faults = self.server.proxy  # type: ignore[attr-defined]
        body = self._body()
        if self.path.startswith("/_faulty/"):
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            data = json.dumps(proxy.control(parts.path.rsplit("/", 1)[1], query)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        client = client_of(self.headers.get("User-Agent", ""))
        fault = proxy.fault_for(self.command, self.path, client)
        if fault is not None:
            status, code, message = fault
            bucket = self.path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
            data = error_body(code, message, bucket)
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            return
        headers = [
            (k, v)
            for k, v in self.headers.items()
            if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length"
        ]
        status, answer_headers, data = proxy.forward(self.command, self.path, headers, body)
        proxy.forwarded_one(self.command, self.path, client)
        self.send_response(status)
        for name, value in answer_headers:
            lower = name.lower()
            if lower in _HOP_BY_HOP or lower in ("date", "server"):
                continue
            if lower == "content-length" and self.command != "HEAD":
                continue  # set below, from what was read
            self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.end_headers()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any


# -- Spark: a Connect server, and the environment of a local cluster's processes ------------------


def spark_home() -> str:
    """Where pyspark keeps Spark (``bin/spark-submit``, ``bin/spark-class``, ``jars/``)."""
    import pyspark

    return os.path.dirname(pyspark.__file__)


def wait_for_port(port: int, process: subprocess.Popen, what: str, timeout: float = 90) -> None:
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
        "SPARK_HOME": spark_home(),
        "SPARK_CONF_DIR": conf_dir,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": os.path.join(workdir, "work"),
        "SPARK_LOG_DIR": os.path.join(workdir, "logs"),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


@contextlib.contextmanager
def connect_server(workdir: str, conf: dict[str, str] | None = None) -> Iterator[str]:
    """pyspark's bundled Spark Connect server (local[2]), with ``conf``'s Spark settings
    besides the ones below; yields the ``sc://`` URL."""
    os.makedirs(workdir, exist_ok=True)
    env = cluster_env(workdir)
    from spark_purgatory.kafka_broker import free_port

    port = free_port()
    log = open(os.path.join(workdir, "connect.log"), "w")  # noqa: SIM115 - closed below
    jars = os.path.join(spark_home(), "jars")
    jar = next(f for f in os.listdir(jars) if f.startswith("spark-connect_"))
    server = subprocess.Popen(
        [
            os.path.join(spark_home(), "bin", "spark-submit"),
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
            os.path.join(jars, jar),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, server, "the Spark Connect server", timeout=120)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="a fault-injecting proxy in front of an S3 server")
    parser.add_argument("--target", required=True, help="the server's http://host:port")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    server = _Server(("127.0.0.1", 0), _Handler)
    server.proxy = _Faults(args.target, args.seed)  # type: ignore[attr-defined]
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
