"""Where the project writes its own files: every path a URI, one mapping, one set of settings.

Paths may be plain paths or URIs (``s3://``, ``s3a://``, ``gs://``, ``abfss://``, ``dbfs:/``,
``/Volumes/...``).  What the project writes itself goes through pyarrow's filesystems and
delta-rs, which see a path through ``location``; ``Storage`` carries the ``storage.*`` keys to
both, and the ``AWS_*`` / ``AZURE_STORAGE_*`` variables fill in the rest.

Invariants: nothing is resolved against the working directory except a plain relative path
the user gave; a file written with ``write_once`` is never replaced.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

#: the URI schemes of Azure Data Lake Storage / Blob Storage that pyarrow and delta-rs both read
_AZURE_SCHEMES = ("abfss://", "abfs://", "az://")


def location(uri: str) -> str:
    """A path or URI as pyarrow and delta-rs know it.

    Databricks: ``dbfs:/x`` is the FUSE mount ``/dbfs/x`` on the driver and the executors, a
    Unity Catalog volume ``dbfs:/Volumes/c/s/v`` is its own mount ``/Volumes/c/s/v``.

    >>> location("s3a://bucket/chk"), location("dbfs:/chk"), location("file:///t"), location("/Volumes/c/s/v")
    ('s3://bucket/chk', '/dbfs/chk', '/t', '/Volumes/c/s/v')
    >>> location("dbfs:/Volumes/c/s/v/chk"), location("abfss://c@acct.dfs.core.windows.net/t")
    ('/Volumes/c/s/v/chk', 'abfss://c@acct.dfs.core.windows.net/t')
    """
    for hadoop in ("s3a://", "s3n://"):
        if uri.startswith(hadoop):
            return "s3://" + uri[len(hadoop) :]
    if uri.startswith("dbfs:/"):
        inside = uri[len("dbfs:/") :].lstrip("/")
        return "/" + inside if inside.startswith("Volumes/") else "/dbfs/" + inside
    if uri.startswith("file:"):
        return "/" + uri[len("file:") :].lstrip("/")
    return uri


def join(uri: str, *parts: str) -> str:
    """``uri/part/...`` for paths and URIs alike (the URI's scheme is kept as given).

    >>> join("s3a://b/chk/", "accumulator"), join("/chk", "a", "b")
    ('s3a://b/chk/accumulator', '/chk/a/b')
    """
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])


@dataclass(frozen=True)
class Storage:
    """The ``storage.*`` settings, for pyarrow's filesystems and delta-rs's storage options.

    Each field is the ``storage.*`` key of its name (docs/configuration.md); ``retries`` goes
    to pyarrow's AWS retry strategy, delta-rs's ``max_retries`` and Spark's S3A retries.

    >>> Storage(endpoint="http://127.0.0.1:9000", allow_http=True).delta_options("s3a://b/t")["AWS_ENDPOINT_URL"]
    'http://127.0.0.1:9000'
    >>> Storage().delta_options("/tmp/t") is None
    True
    """

    endpoint: str = ""
    region: str = ""
    allow_http: bool = False
    s3_conditional_put: str = "etag"
    retries: int = 10

    @classmethod
    def of(cls, config: Any) -> Storage:
        """The settings a ``PurgatoryConfig`` holds."""
        return cls(
            endpoint=config.storage_endpoint,
            region=config.storage_region,
            allow_http=config.storage_allow_http,
            s3_conditional_put=config.storage_s3_conditional_put,
            retries=config.storage_retries,
        )

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """pyarrow's filesystem for ``uri`` and the path inside it (absolute for local paths)."""
        where = location(uri)
        if "://" not in where:
            return pafs.LocalFileSystem(), os.path.abspath(where)
        if where.startswith(_AZURE_SCHEMES):
            return self._azure_filesystem(where)
        if where.startswith("s3://"):
            return self._s3_filesystem(where)
        fs, path = pafs.FileSystem.from_uri(where)
        return fs, path.rstrip("/")

    def _s3_filesystem(self, where: str) -> tuple[pafs.S3FileSystem, str]:
        """pyarrow's S3 filesystem from our settings (and the AWS variables for what they leave
        open), with our retries; the path is ``bucket/key``.  Without a region or an endpoint,
        the bucket's own region, asked of AWS, as ``FileSystem.from_uri`` does.

        >>> fs, path = Storage(endpoint="http://127.0.0.1:9000", region="eu-west-1").filesystem("s3a://b/chk/")
        >>> path, fs.region, fs.__reduce__()[1][0]["endpoint_override"], fs.__reduce__()[1][0]["scheme"]
        ('b/chk', 'eu-west-1', '127.0.0.1:9000', 'http')
        """
        path = where[len("s3://") :].split("?", 1)[0].rstrip("/")
        options: dict[str, Any] = {}
        if self.endpoint:
            options["endpoint_override"] = self.endpoint.split("://", 1)[-1]
            options["scheme"] = "http" if self.allow_http or self.endpoint.startswith("http:") else "https"
        else:
            from_env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if from_env:
                options["endpoint_override"] = from_env
        if self.region:
            options["region"] = self.region
        elif "endpoint_override" not in options:  # AWS itself: the bucket's region
            options["region"] = pafs.resolve_s3_region(path.split("/", 1)[0])
        # AWS's exponential pauses, which start shorter than the "standard" strategy's
        strategy = pafs.AwsDefaultS3RetryStrategy(max_attempts=self.retries + 1)
        return pafs.S3FileSystem(**options, retry_strategy=strategy), path

    def delta_options(self, uri: str) -> dict[str, str] | None:
        """delta-rs's ``storage_options`` for a table at ``uri`` (None: nothing to add)."""
        where = location(uri)
        if where.startswith(_AZURE_SCHEMES):
            options = {
                "azure_storage_account_name": self._azure_address(where)[1],
                "azure_storage_endpoint": self.endpoint,
                "allow_http": "true" if self.allow_http else "",
                "max_retries": str(self.retries),
            }
        elif where.startswith("s3://"):
            options = {
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_REGION": self.region,
                "AWS_ALLOW_HTTP": "true" if self.allow_http else "",
                "conditional_put": self.s3_conditional_put,
                "max_retries": str(self.retries),
            }
        else:
            return None
        return {k: v for k, v in options.items() if v}

    def hadoop_settings(self, *uris: str) -> dict[str, str]:
        """The same settings for Spark's own file system at ``uris`` (Hadoop's S3A), as session
        keys (``spark.hadoop.<key>`` when building a session: ``storage_session_conf``): a
        custom endpoint addressed path-style, as pyarrow and delta-rs do.  ADLS: nothing; ABFS
        reads its own ``fs.azure.*`` keys (``docs/deployment.md``).

        >>> moto = Storage(endpoint="http://127.0.0.1:9000", region="us-east-1", allow_http=True)
        >>> sorted(moto.hadoop_settings("s3a://bucket/chk"))  # doctest: +NORMALIZE_WHITESPACE
        ['fs.s3a.attempts.maximum', 'fs.s3a.connection.ssl.enabled', 'fs.s3a.endpoint',
         'fs.s3a.endpoint.region', 'fs.s3a.path.style.access']
        >>> Storage().hadoop_settings("s3a://bucket/chk"), Storage().hadoop_settings("/local/chk")
        ({'fs.s3a.attempts.maximum': '10'}, {})
        """
        if not any(location(uri).startswith("s3://") for uri in uris):
            return {}
        settings = {"fs.s3a.attempts.maximum": str(self.retries)}
        if self.endpoint:
            settings["fs.s3a.endpoint"] = self.endpoint
            settings["fs.s3a.path.style.access"] = "true"
        if self.region:
            settings["fs.s3a.endpoint.region"] = self.region
        if self.allow_http:
            settings["fs.s3a.connection.ssl.enabled"] = "false"
        return settings

    def _azure_endpoint(self) -> str:
        return self.endpoint or os.environ.get("AZURE_STORAGE_ENDPOINT", "")

    def _azure_address(self, where: str) -> tuple[str, str, str]:
        """(container, account, path) of an ``abfss://`` or ``az://`` URI; the account is the
        URI's host, else ``AZURE_STORAGE_ACCOUNT_NAME``, else a path-style endpoint's path.

        >>> Storage()._azure_address("abfss://c@acct.dfs.core.windows.net/a/b")
        ('c', 'acct', 'a/b')
        >>> Storage(endpoint="http://127.0.0.1:10000/devstoreaccount1")._azure_address("az://c/a/")
        ('c', 'devstoreaccount1', 'a')
        """
        parts = urlsplit(where)
        container, _, host = parts.netloc.rpartition("@")
        if not container:  # az://container/path
            container, host = host, ""
        account = (
            host.split(".", 1)[0]
            or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME", "")
            or urlsplit(self._azure_endpoint()).path.strip("/")
        )
        return container, account, parts.path.strip("/")

    def _azure_filesystem(self, where: str) -> tuple[pafs.FileSystem, str]:
        """pyarrow's ``AzureFileSystem`` for the URI's account, and ``container/path`` in it."""
        container, account, path = self._azure_address(where)
        if not account:
            raise ValueError(
                f"{where}: which Azure storage account? Use abfss://container@ACCOUNT.dfs.core.windows.net"
                "/..., set AZURE_STORAGE_ACCOUNT_NAME, or a path-style storage.endpoint"
            )
        key, sas = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY"), os.environ.get("AZURE_STORAGE_SAS_TOKEN")
        credential = {"account_key": key} if key else {"sas_token": sas} if sas else {}  # else Azure's chain
        fs = pafs.AzureFileSystem(account_name=account, **credential, **self._blob_service(account))
        return fs, f"{container}/{path}".rstrip("/")

    def _blob_service(self, account: str) -> dict[str, str]:
        """The endpoint as pyarrow's authorities (none: Azure's own).  pyarrow puts the account
        before an authority starting with ``.``; Azurite's blob endpoint stands for dfs too.

        >>> azurite = Storage(endpoint="http://127.0.0.1:10000/devstoreaccount1")
        >>> azurite._blob_service("devstoreaccount1")["blob_storage_authority"]
        '127.0.0.1:10000'
        >>> gov = Storage(endpoint="https://acct.blob.core.usgovcloudapi.net")
        >>> gov._blob_service("acct")["dfs_storage_authority"]
        '.dfs.core.usgovcloudapi.net'
        """
        endpoint = urlsplit(self._azure_endpoint())
        if not endpoint.netloc:
            return {}
        if endpoint.path.strip("/"):  # http://host:port/account
            blob = dfs = endpoint.netloc
        elif endpoint.netloc.startswith(account + "."):  # https://account.blob.<domain>
            blob = endpoint.netloc[len(account) :]
            dfs = blob.replace(".blob.", ".dfs.", 1)
        else:
            raise ValueError(
                f"storage.endpoint {endpoint.geturl()!r}: an Azure blob endpoint is "
                f"https://{account}.blob.<domain> or path-style http://host:port/{account}"
            )
        scheme = endpoint.scheme
        return {
            "blob_storage_authority": blob,
            "dfs_storage_authority": dfs,
            "blob_storage_scheme": scheme,
            "dfs_storage_scheme": scheme,
        }


def storage_session_conf(storage: Storage, uris: Iterable[str]) -> dict[str, str]:
    """``Storage.hadoop_settings`` for ``uris`` as a session's ``spark.hadoop.<key>`` settings,
    and ``s3://`` read by S3A too (plain Hadoop knows only ``s3a://``)."""
    settings = {**storage.hadoop_settings(*uris), "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    return {f"spark.hadoop.{k}": v for k, v in settings.items()}


#: an object store's answers that may pass, as pyarrow reports them (AWS's SDK for C++ reports a
#: 503 to a read of fewer bytes than the error's own body as INTERNAL_FAILURE, "Failed to flush
#: response stream", and does not retry it)
_TRANSIENT = re.compile(
    r"Failed to flush response stream|INTERNAL_FAILURE|SLOW_DOWN|SlowDown|SERVICE_UNAVAILABLE"
    r"|NETWORK_CONNECTION|REQUEST_TIMEOUT|HTTP status 5\d\d"
)
#: how often ``read_bytes`` reads again, pausing ``_PAUSE_S`` doubled each time
_READ_ATTEMPTS, _PAUSE_S = 11, 0.025


def read_bytes(fs: pafs.FileSystem, path: str, limit: int | None = None) -> bytes:
    """The whole file at ``path`` (its first ``limit`` bytes), read again with growing pauses
    while the store answers with an error that may pass (pyarrow's own retries miss those:
    ``_TRANSIENT``); ``FileNotFoundError`` when there is none."""
    for attempt in range(_READ_ATTEMPTS):
        try:
            with fs.open_input_stream(path) as f:
                return f.read() if limit is None else f.read(limit)
        except FileNotFoundError:
            raise
        except OSError as error:
            if attempt == _READ_ATTEMPTS - 1 or not _TRANSIENT.search(str(error)):
                raise
            time.sleep(_PAUSE_S * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def write_once(fs: pafs.FileSystem, path: str, data: bytes) -> bytes:
    """Write ``data`` at ``path`` unless a file is there; return what the file holds.

    Locally the file is linked into place, which fails if it exists, so two writers agree on
    one content.  Object stores check and put (pyarrow offers no conditional put): callers
    use it only where one writer at a time is the rule, e.g. a checkpoint's first start.
    """
    try:
        return read_bytes(fs, path)
    except FileNotFoundError:
        pass
    if isinstance(fs, pafs.LocalFileSystem):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.remove(tmp)
    else:
        with fs.open_output_stream(path) as out:
            out.write(data)
    return read_bytes(fs, path)


class WholeFile:
    """An output stream whose file readers see whole or not at all (locally a temporary
    name, synced and renamed; on an object store a put, which is atomic)."""

    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self.fs, self.path = fs, path
        self._local = isinstance(fs, pafs.LocalFileSystem)
        if self._local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # a dot name: Spark's and Hadoop's file listings skip it (``handoff.wake`` reads a
            # directory written this way as a stream)
            head, tail = os.path.split(path)
            self._tmp = os.path.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:12]}")
            self.stream = fs.open_output_stream(self._tmp)
        else:  # an object store's put is atomic: an interrupted upload leaves no object
            self.stream = fs.open_output_stream(path)

    def commit(self) -> None:
        self.stream.close()
        if self._local:  # on disk before it is named: a machine crash leaves no empty file
            fd = os.open(self._tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self._tmp, self.path)

    def abort(self) -> None:
        if self._local:
            self.stream.close()
            remove(self.fs, [self._tmp])
        # an object store's unfinished upload is abandoned with the stream


def write_whole(fs: pafs.FileSystem, path: str, write: Callable[[Any], None]) -> None:
    """Write a small file whole or not at all (manifests, ``staged_through``, mailbox files)."""
    out = WholeFile(fs, path)
    try:
        write(out.stream)
    except BaseException:
        out.abort()
        raise
    out.commit()


def listing(fs: pafs.FileSystem, directory: str, *, recursive: bool = False) -> list[pafs.FileInfo]:
    """The files under ``directory`` (none if it does not exist; listed again when another
    task creates it meanwhile)."""
    selector = pafs.FileSelector(directory, recursive=recursive, allow_not_found=True)
    for attempt in range(3):
        try:
            infos = fs.get_file_info(selector)
            break
        except FileNotFoundError:
            if attempt == 2:
                raise
    return [i for i in infos if i.type == pafs.FileType.File]


def numbered(fs: pafs.FileSystem, directory: str, name: re.Pattern[str]) -> list[tuple[tuple[int, ...], str]]:
    r"""The files in ``directory`` whose names match ``name``, as (its groups as numbers, the
    file's name), in order: the numbered files a directory of batches or posts holds.

    >>> numbered(pafs.LocalFileSystem(), "/nowhere", re.compile(r"^(\d+)\.txt$"))
    []
    """
    found = []
    for info in listing(fs, directory):
        if match := name.match(info.base_name):
            found.append((tuple(int(g) for g in match.groups()), info.base_name))
    return sorted(found)


def remove(fs: pafs.FileSystem, paths: Iterable[str], *, prune: bool = False) -> None:
    """Delete files (missing ones are fine); with ``prune``, also their emptied local directories."""
    local = isinstance(fs, pafs.LocalFileSystem)
    for path in list(paths):
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass
        parent = os.path.dirname(path)
        if prune and local and os.path.isdir(parent) and not os.listdir(parent):
            try:
                os.rmdir(parent)
            except OSError:  # refilled meanwhile
                pass
