"""An S3-compatible object store on loopback for the tests: ``moto``'s server, one bucket.

``S3Store()`` starts ``moto.server.ThreadedMotoServer`` on 127.0.0.1 (a free port) and
creates a bucket; the project reaches it the way a user reaches MinIO or S3: our
``storage.*`` keys (``settings``) for the endpoint, the standard AWS variables (``env``)
for the credentials.  ``storage_options`` are delta-rs's, to read the tables back.
"""

from __future__ import annotations

import copy
import logging
import socket
import subprocess
import sys
import time

from spark_purgatory.storage import Storage

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
        self.server_endpoint = self.endpoint  # the test's own look (keys, put): never through a proxy
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
        the test's own ``keys`` and ``put`` still talk to the server itself."""
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


def check_segment_files(uri: str, storage) -> None:
    """Segment files at ``uri`` round-trip, also through a pickled store (as executors get it)."""
    import pickle

    from spark_purgatory.state import SegmentStore

    store = SegmentStore(uri, storage=storage)
    name = store.write("base", {"a": b"xyz"}, {"shard": "0"})
    again = pickle.loads(pickle.dumps(store))
    assert again.read(name) == ({"a": b"xyz"}, {"shard": "0"})
    assert again.segments() == [name]
    again.delete([name])
    assert store.segments() == []
