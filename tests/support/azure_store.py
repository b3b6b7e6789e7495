"""An Azure Storage account on loopback for the tests: Azurite's blob service, one container.

``AzureStore()`` starts Azurite (npm's ``azurite``, which ``make test`` installs into
``.ci/node`` from its ``package-lock.json``) on 127.0.0.1 at a free port, in memory, without
telemetry, and creates a container.  The project reaches it the way a user reaches an ADLS
account: ``abfss://container@account.dfs.core.windows.net/...`` URIs, our ``storage.*`` keys
(``settings``: the account's blob endpoint, path-style as Azurite serves it) and the standard
Azure variables (``env``: the account and its key).  ``storage_options`` are delta-rs's, to
read the tables back.  Azurite serves the blob API only (no hierarchical namespace, no dfs
endpoint); ``spark_purgatory.storage`` uses its blob endpoint for both.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time

import pyarrow.fs as pafs

from spark_purgatory.storage import Storage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AZURITE = os.path.join(ROOT, ".ci", "node", "node_modules", ".bin", "azurite-blob")
CONTAINER = "purgatory"
#: Azurite's well-known development account (public, the same in every Azurite)
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: what a user exports
ENV = {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": KEY}
_LISTENING = re.compile(r"listens on (http://127\.0\.0\.1:\d+)")


class AzureStore:
    """Azurite's blob service on loopback with one container; ``stop()`` it when done."""

    def __init__(self, container: str = CONTAINER, *, timeout: float = 60.0) -> None:
        if not os.access(AZURITE, os.X_OK):
            raise RuntimeError(
                f"Azurite is not installed ({AZURITE} missing): `make test` installs it with "
                "`npm ci --prefix .ci/node` (needs node >= 20 and npm)"
            )
        self.workdir = tempfile.mkdtemp(prefix="azurite-")  # its log; the data stays in memory
        self.log = os.path.join(self.workdir, "azurite.log")
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [
                    AZURITE,
                    *("--blobHost", "127.0.0.1", "--blobPort", "0"),
                    *("--inMemoryPersistence", "--extentMemoryLimit", "512"),
                    *("--disableTelemetry", "--silent", "--skipApiVersionCheck", "--loose"),
                ],
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.endpoint = f"{self._listening(timeout)}/{ACCOUNT}"  # path-style: the account in the path
        self.container = container
        self.filesystem().create_dir(container)

    def _listening(self, timeout: float) -> str:
        """The URL Azurite says it listens on (it picks the port)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log) as log:
                text = log.read()
            if match := _LISTENING.search(text):
                return match.group(1)
            if self.process.poll() is not None:
                raise RuntimeError(f"Azurite exited ({self.process.returncode}): {text}")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Azurite did not start within {timeout} s")

    def uri(self, *parts: str, scheme: str = "abfss") -> str:
        """``abfss://container@account.dfs.core.windows.net/...`` (Hadoop's) or ``az://container/...``."""
        base = {
            "abfss": f"abfss://{self.container}@{ACCOUNT}.dfs.core.windows.net",
            "az": f"az://{self.container}",
        }
        return "/".join([base[scheme], *parts])

    @property
    def env(self) -> dict[str, str]:
        return dict(ENV)

    @property
    def settings(self) -> dict[str, str]:
        """Our ``storage.*`` keys for this account (as ``--set`` or a conf file would give them)."""
        return {"storage.endpoint": self.endpoint, "storage.allow.http": "true"}

    @property
    def storage(self) -> Storage:
        return Storage(endpoint=self.endpoint, allow_http=True)

    @property
    def storage_options(self) -> dict[str, str]:
        """delta-rs's options to read a table back (the key included: no environment needed)."""
        return {**(self.storage.delta_options(self.uri()) or {}), "azure_storage_account_key": KEY}

    def filesystem(self) -> pafs.AzureFileSystem:
        authority = self.endpoint.split("://", 1)[1].split("/", 1)[0]
        return pafs.AzureFileSystem(
            account_name=ACCOUNT,
            account_key=KEY,
            blob_storage_authority=authority,
            dfs_storage_authority=authority,
            blob_storage_scheme="http",
            dfs_storage_scheme="http",
        )

    def keys(self, prefix: str = "") -> list[str]:
        """The blob names under ``prefix`` (to check what was written where)."""
        where = f"{self.container}/{prefix}".rstrip("/")
        selector = pafs.FileSelector(where, recursive=True, allow_not_found=True)
        return sorted(
            i.path[len(self.container) + 1 :]
            for i in self.filesystem().get_file_info(selector)
            if i.type == pafs.FileType.File
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)
