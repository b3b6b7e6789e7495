"""Formats: what a source holds, told by its files (a path) or its schema (a DataFrame).

A path is told by what is there, never assumed: ``_delta_log`` is Delta, ``PAR1`` Parquet,
UTF-8 text (or a compressed file Spark's text reader opens) JSON lines; anything else is
refused with ``SourceFormatError``.  An empty directory takes the other input's format, or
JSON lines.  A format given explicitly is checked the same way.

Invariant: a path is read in the format its files have, or not at all.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..config import ConfigError
from ..contract import EVENT_INPUT, OPERATION_INPUT, SOURCE_OPERATIONS
from ..runtime.session import PROVIDED_BY, loadable
from ..storage import Storage, read_bytes
from .schema import check_parquet_schema

log = logging.getLogger(__name__)

#: how an input is read: ``auto`` tells the format by a path's files or a DataFrame's schema;
#: ``parquet`` and ``delta`` are typed
SourceFormat = Literal["auto", "json", "kafka", "typed", "parquet", "delta"]
_TYPED_FORMATS = ("typed", "parquet", "delta")
_KAFKA_COLUMNS = {"key", "value", "topic", "partition", "offset"}
#: what a directory can hold, as ``format_of_path`` says it
EMPTY, BINARY, MIXED = "empty", "binary", "mixed"
#: extensions Spark's text reader decompresses (Hadoop codecs)
_COMPRESSED = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".zstd")
_SNIFF_FILES = 8  # files looked at per directory
_SNIFF_BYTES = 4096


class SourceFormatError(ConfigError):
    """A source path holds files of another format than the one asked for, or of none we read."""


def source_format_of(df: DataFrame, fmt: SourceFormat = "auto") -> str:
    """How ``parse_*`` read ``df``: ``json`` (one text column ``value``), ``kafka`` (Kafka's
    source schema, JSON in ``value``) or ``typed`` (columns of the input contract).

    >>> source_format_of(None, "parquet"), source_format_of(None, "kafka")
    ('typed', 'kafka')
    """
    if fmt in _TYPED_FORMATS:
        return "typed"
    if fmt in ("json", "kafka"):
        return fmt
    if fmt != "auto":
        raise ValueError(
            f"unknown source format {fmt!r}; allowed: auto, json, kafka, {', '.join(_TYPED_FORMATS)}"
        )
    names = set(df.columns)
    if names == {"value"}:
        return "json" if isinstance(df.schema["value"].dataType, T.StringType) else "kafka"
    return "kafka" if _KAFKA_COLUMNS <= names else "typed"


def from_kafka(operations: DataFrame, events: DataFrame, fmt: SourceFormat = "auto") -> bool:
    """Does an input come from Kafka (``source_format_of``)?  Its watermark is then held back
    per partition (``handoff.partitions``), not moved by the rows' own.

    >>> from_kafka(None, None, "json"), from_kafka(None, None, "kafka")
    (False, True)
    """
    return any(source_format_of(df, fmt) == "kafka" for df in (operations, events))


# -- a path's format, told by its files -------------------------------------------------------------


class Found(NamedTuple):
    """What a directory holds: its format, and the file (or directory) that says so."""

    format: str
    evidence: str


def _visible(info: pafs.FileInfo) -> bool:
    return not info.base_name.startswith(("_", "."))


def _sniff(fs: pafs.FileSystem, path: str) -> str:
    """One file's format from its first bytes (and, for compressed text, its name): text when
    most lines of its head are clean text (a few bad lines become ``rejected`` rows)."""
    if path.endswith(_COMPRESSED):
        return "json"
    head = read_bytes(fs, path, _SNIFF_BYTES)  # retried: a 503 to a small read (storage)
    if head[:4] == b"PAR1":
        return "parquet"
    lines = head.split(b"\n")
    if len(lines) > 1 and len(head) == _SNIFF_BYTES:
        lines = lines[:-1]  # the sample cuts the last line
    clean = sum(1 for line in lines if b"\x00" not in line and _utf8(line))
    return "json" if clean * 2 >= len(lines) else BINARY


def _utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _files(fs: pafs.FileSystem, root: str, depth: int = 3) -> list[pafs.FileInfo]:
    """Up to ``_SNIFF_FILES`` non-empty visible files under ``root`` (partition directories
    ``k=v`` included, a few levels down)."""
    infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    files = [i for i in infos if i.type == pafs.FileType.File and _visible(i) and i.size]
    for d in sorted((i for i in infos if i.type == pafs.FileType.Directory and _visible(i)), key=str):
        if len(files) >= _SNIFF_FILES or depth == 0:
            break
        files += _files(fs, d.path, depth - 1)
    return sorted(files, key=lambda i: i.path)[:_SNIFF_FILES]


def format_of_path(path: str, *, storage: Storage | None = None) -> Found:
    """What the directory ``path`` (a path or a URI) holds: ``delta``, ``parquet``, ``json``,
    ``empty`` (no files yet), ``binary`` or ``mixed`` (``SourceFormatError`` territory)."""
    fs, root = (storage or Storage()).filesystem(path)
    if fs.get_file_info(f"{root}/_delta_log").type == pafs.FileType.Directory:
        return Found("delta", f"{path}/_delta_log")
    if fs.get_file_info(root).type == pafs.FileType.File:
        found = [pafs.FileInfo(root, pafs.FileType.File)]
    else:
        found = _files(fs, root)
    kinds = {info.path: _sniff(fs, info.path) for info in found}
    if not kinds:
        return Found(EMPTY, path)
    formats = set(kinds.values())
    first = next(iter(kinds))
    if len(formats) > 1:
        by_format = {fmt: name for name, fmt in kinds.items()}
        return Found(MIXED, ", ".join(f"{name.rsplit('/', 1)[-1]}: {fmt}" for fmt, name in by_format.items()))
    return Found(formats.pop(), first)


def _refuse(path: str, found: Found, asked: str) -> SourceFormatError:
    if found.format == MIXED:
        what = f"files of several formats ({found.evidence})"
        todo = "keep one format per directory"
    elif found.format == BINARY:
        what = f"binary files that are neither Parquet nor JSON lines (e.g. {found.evidence})"
        todo = "write JSON lines or Parquet, or read the files yourself and pass the DataFrame"
    else:
        what = f"{found.format} ({found.evidence})"
        todo = f"pass source_format={found.format!r} (the job: --source-format {found.format})"
    return SourceFormatError(f"{path} holds {what}, not {asked}: {todo}")


def check_path_format(path: str, fmt: str, *, storage: Storage | None = None) -> str:
    """The format to read ``path`` with: ``fmt``, or for ``auto`` the one its files have
    (``empty`` for an empty directory); ``SourceFormatError`` when the files are of another
    format than ``fmt``, or for ``auto`` of none this project reads.
    """
    if fmt == "kafka":
        return fmt
    found = format_of_path(path, storage=storage)
    if found.format == EMPTY:
        return EMPTY if fmt == "auto" else fmt
    if fmt == "auto":
        if found.format in (BINARY, MIXED):
            raise _refuse(path, found, "JSON lines, Parquet or a Delta table")
        return found.format
    other = found.format != fmt and (found.format in ("parquet", "delta") or fmt != "json")
    if other or (found.format == MIXED and "parquet" in found.evidence):
        raise _refuse(path, found, fmt)
    return fmt


def formats_of(paths: list[str], fmt: str, *, storage: Storage | None = None) -> list[str]:
    """The format of each input path (``check_path_format``); an empty directory takes the
    format of the others, JSON lines when every one is empty."""
    formats = [check_path_format(p, fmt, storage=storage) for p in paths]
    known = {f for f in formats if f != EMPTY}
    if EMPTY not in formats:
        return formats
    fallback = known.pop() if len(known) == 1 else "json"
    if not known and fallback == "json" and fmt == "auto":
        log.warning(
            "%s: no files yet, read as JSON lines; pass source_format='parquet' (or 'delta') "
            "if Parquet files will arrive",
            ", ".join(p for p, f in zip(paths, formats, strict=True) if f == EMPTY),
        )
    return [fallback if f == EMPTY else f for f in formats]


# -- reading sources ---------------------------------------------------------------------------------

#: schemas for Parquet inputs (the SPEC's input contract as Spark types)
OPERATIONS_PARQUET_SCHEMA: T.StructType = from_arrow_schema(OPERATION_INPUT)
EVENTS_PARQUET_SCHEMA: T.StructType = from_arrow_schema(EVENT_INPUT)


def _parquet_schema(spark: SparkSession, path: str, kind: str, storage: Storage | None) -> T.StructType:
    """The files' own schema when there are files (a wrong type then fails at start), else the
    contract's: the first file's footer, as Spark's inference reads it, without the Spark job
    it runs.  Columns outside the contract that Spark cannot type are left out."""
    contract = OPERATIONS_PARQUET_SCHEMA if kind == SOURCE_OPERATIONS else EVENTS_PARQUET_SCHEMA
    found = format_of_path(path, storage=storage)
    if found.format != "parquet":
        return contract  # no files yet
    fs, _root = (storage or Storage()).filesystem(path)
    with fs.open_input_file(found.evidence) as f:
        arrow = pq.read_schema(f)
    check_parquet_schema(arrow, kind, found.evidence)
    fields = []
    for field in arrow:
        if pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            continue  # outside the contract (check_parquet_schema refused it there): never read
        try:
            fields.append(from_arrow_schema(pa.schema([field])).fields[0])
        except Exception:  # noqa: BLE001 - a type Spark's Arrow conversion does not know
            if field.name in contract.fieldNames():
                return _inferred(spark, path, contract)
    return T.StructType(fields)


def _inferred(spark: SparkSession, path: str, contract: T.StructType) -> T.StructType:
    """Spark's own inference of the files' schema (a Spark job), the contract's if it fails."""
    try:
        return spark.read.parquet(path).schema
    except AnalysisException as error:
        if "PARQUET_TYPE_ILLEGAL" in str(error) or "UNABLE_TO_INFER_SCHEMA" in str(error):
            return contract
        raise


def _require_delta(spark: SparkSession) -> None:
    from ..runtime.jars import DELTA_COORDINATES
    from ..runtime.session import delta_classes_available

    if not delta_classes_available(spark):
        raise ConfigError(
            "source format delta: Spark's Delta data source is not on this session's classpath "
            f"(start Spark with --packages {DELTA_COORDINATES}, or on Databricks); "
            "or read the table yourself and pass the DataFrame (typed input)"
        )


def read_stream(
    spark: SparkSession,
    path: str,
    fmt: SourceFormat = "json",
    *,
    kind: Literal["operations", "events"] = "operations",
    max_files_per_trigger: int | None = None,
    kafka_options: dict[str, str] | None = None,
    storage: Storage | None = None,
) -> DataFrame:
    """A streaming DataFrame over ``path``: JSON lines, Parquet, a Delta table or a Kafka topic
    (``auto``: the format the files have)."""
    if fmt == "kafka":
        options = {**KAFKA_DEFAULTS, **(kafka_options or {})}
        if not _KAFKA_SUBSCRIPTIONS & set(options):  # else the user's assign/subscribePattern
            options["subscribe"] = path
        check_kafka_source(spark, options)
        return spark.readStream.format("kafka").options(**options).load()
    if fmt not in ("json", "parquet", "delta", "auto"):
        raise ConfigError(f"unknown source format {fmt!r}; allowed: auto, json, parquet, delta, kafka")
    reader = spark.readStream
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", int(max_files_per_trigger))
    return _load(spark, reader, path, fmt, kind, storage)


def _load(
    spark: SparkSession, reader: Any, path: str, fmt: str, kind: str, storage: Storage | None
) -> DataFrame:
    """``path`` loaded by ``reader`` (a stream's or a batch's) in the format its files have."""
    fmt = formats_of([path], fmt, storage=storage)[0]
    if fmt == "json":
        return reader.format("text").load(path)
    if fmt == "parquet":
        return reader.schema(_parquet_schema(spark, path, kind, storage)).parquet(path)
    _require_delta(spark)
    return reader.format("delta").load(path)


# -- Kafka topics ------------------------------------------------------------------------------------

#: Kafka source options the operator sets unless given: the next micro-batch's task waits
#: for the fetch the broker holds this long (docs/performance.md, "Kafka's held fetch")
KAFKA_DEFAULTS = {"kafka.fetch.max.wait.ms": "10"}
#: the Kafka source's ways to name what it reads (exactly one is given)
_KAFKA_SUBSCRIPTIONS = {"subscribe", "subscribePattern", "assign"}
#: how long the check before a query waits for the brokers (``kafka.default.api.timeout.ms``
#: overrides it): Spark's own source would retry an unreachable broker for minutes
_KAFKA_CHECK_MS = 30_000


def _jvm(spark: SparkSession):
    """The session's JVM through py4j; None on Spark Connect (no driver JVM here)."""
    try:
        return spark.sparkContext._jvm
    except Exception:  # noqa: BLE001 - a Connect session has no sparkContext
        return None


def check_kafka_source(spark: SparkSession, options: dict[str, str]) -> None:
    """Before a query reads Kafka: Spark's Kafka source is on the classpath, the brokers answer,
    and each subscribed topic exists; else ``ConfigError`` in one line (Spark's source retries
    an unreachable broker for minutes, and names no missing topic).  Skipped on Spark Connect.
    """
    jvm = _jvm(spark)
    if jvm is None:
        return
    if not loadable(spark, PROVIDED_BY["kafka"]):
        raise ConfigError(
            "source format kafka: Spark's Kafka source is not on this session's class path: start "
            "the session with what `spark-purgatory jars --kafka` prints as spark.jars (spark-submit "
            '--jars "$(spark-purgatory jars --kafka)"); a running JVM\'s class path is fixed'
        )
    servers = options.get("kafka.bootstrap.servers")
    if not servers:
        raise ConfigError(
            "source format kafka needs kafka.bootstrap.servers "
            "(the job: --set kafka.bootstrap.servers=HOST:PORT)"
        )
    found = kafka_topics(spark, options)
    topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
    missing = [t for t in topics if t not in found]
    if missing:
        raise ConfigError(
            f"Kafka topic {', '.join(repr(t) for t in missing)} does not exist on {servers} "
            "(deleted, or not created yet: create it before starting the query)"
        )


class KafkaLoginRefused(ConfigError):
    """The brokers answered, and refused the client's login or rights (SASL, ACLs)."""


def kafka_topics(spark: SparkSession, options: dict[str, str]) -> set[str]:
    """The topics the brokers list, asked by Kafka's ``Admin`` client with the source's
    ``kafka.*`` settings; ``ConfigError`` when they do not answer in time,
    ``KafkaLoginRefused`` when they refuse the login."""
    jvm = _jvm(spark)
    servers = options.get("kafka.bootstrap.servers")
    timeout_ms = int(options.get("kafka.default.api.timeout.ms", _KAFKA_CHECK_MS))
    props = jvm.java.util.Properties()
    for key, value in options.items():
        if key.startswith("kafka."):
            props.put(key[len("kafka.") :], str(value))
    props.put("default.api.timeout.ms", str(timeout_ms))
    props.put(
        "request.timeout.ms", str(min(timeout_ms, int(options.get("kafka.request.timeout.ms", timeout_ms))))
    )
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    try:
        names = admin.listTopics().names().get(timeout_ms, jvm.java.util.concurrent.TimeUnit.MILLISECONDS)
        return set(names)
    except Exception as error:  # noqa: BLE001 - py4j's ExecutionException/TimeoutException
        cause = str(error).splitlines()
        reason = next(
            (line.split("Exception: ", 1)[-1] for line in cause if "Exception: " in line), "no answer"
        )
        if "Authentication failed" in reason or "AuthorizationException" in reason:
            raise KafkaLoginRefused(
                f"Kafka at {servers} refuses this job's login ({reason.strip()}): check the "
                "kafka.sasl.* / kafka.ssl.* settings and the user's rights"
            ) from None
        raise ConfigError(
            f"Kafka at {servers} did not answer within {timeout_ms / 1000:g} s ({reason.strip()}): "
            "check kafka.bootstrap.servers and the kafka.security.protocol / kafka.sasl.* / "
            "kafka.ssl.* settings"
        ) from None
    finally:
        admin.close(jvm.java.time.Duration.ofSeconds(1))


def read_batch(
    spark: SparkSession,
    path: str,
    fmt: SourceFormat = "json",
    *,
    kind: Literal["operations", "events"],
    storage: Storage | None = None,
) -> DataFrame:
    """The static counterpart of ``read_stream`` (for replays and backfills)."""
    if fmt not in ("json", "parquet", "delta", "auto"):
        raise ConfigError(f"batch reads support auto, json, parquet and delta, not {fmt!r}")
    return _load(spark, spark.read, path, fmt, kind, storage)
