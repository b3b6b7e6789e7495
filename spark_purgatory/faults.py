"""Permanent faults: something a failed run needs is gone, said in one line.

A fault that may pass (a broker restarting, a ``503 SlowDown``) is left to the restart
policy.  After a failure the job and ``start``'s handle ask each resource the query depends
on, once (``diagnose``); "no such bucket", "access denied", "no such topic" or "login
refused" ends the job at once with ``PermanentFault``, naming the resource and what to do.
Some failures say by themselves that no restart changes them (``cannot_pass``).

Invariant: a resource that does not answer (a timeout, a 503, a broker away) is never called
gone: that is a fault that may pass, left to the restart policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .config import PurgatoryConfig
from .spark.errors import MicroBatchError, first_cause
from .storage import Storage

#: what a store answers to credentials it does not accept (S3, ADLS, GCS)
_REFUSED = re.compile(
    r"ACCESS_DENIED|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|ExpiredToken|InvalidToken"
    r"|AuthenticationFailed|AuthorizationFailure|\b403\b",
)


class PermanentFault(MicroBatchError):
    """A failed run's cause that no restart fixes; the message is one line naming it."""


#: the job's exit codes (docs/deployment.md, "Exit codes")
EXIT_DONE, EXIT_FAILED, EXIT_REFUSED, EXIT_BROKEN = 0, 1, 2, 3


class CannotPass(MicroBatchError):
    """An error no restart fixes, said in one line; ``exit_code`` is the job's: 2, the
    checkpoint's state does not fit the query; 3, the deployment (analysis, class path)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


#: Spark refusing a checkpoint's state for this query (schemas, the operator's state metadata)
_STATE_DOES_NOT_FIT = re.compile(
    r"STATE_STORE_(KEY|VALUE)_SCHEMA_NOT_COMPATIBLE|StateSchemaNotCompatible|STATE_STORE_INVALID_"
    r"|Provided schema doesn't match to the schema for existing state"
    r"|STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA|INVALID_LOG_VERSION"
)
#: a class the session does not have
_CLASS_MISSING = re.compile(r"ClassNotFoundException|NoClassDefFoundError|DATA_SOURCE_NOT_FOUND")
#: Spark's analysis error, in the JVM (``org.apache.spark.sql.AnalysisException``, Delta's
#: ``DeltaAnalysisException`` ...) or as PySpark raises it
_ANALYSIS = re.compile(r"[A-Za-z]*AnalysisException\b")


def cannot_pass(error: BaseException, checkpoint: str = "") -> CannotPass | None:
    """The ``CannotPass`` that ``error`` (a failed run's, or a start's) is, or None."""
    text = _told(error)
    cause = first_cause(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if _STATE_DOES_NOT_FIT.search(text):
        where = f" --checkpoint {checkpoint}" if checkpoint else ""
        return CannotPass(
            f"the checkpoint's state does not fit this query: {cause}; a checkpoint another version "
            f"wrote may need `spark-purgatory upgrade{where}` (docs/upgrading.md), a query whose "
            "configuration changed a new checkpoint",
            EXIT_REFUSED,
        )
    if _CLASS_MISSING.search(text):
        return CannotPass(
            f"a class is missing from Spark's class path: {cause}; give the session the JARs it "
            "needs (--jars, spark.jars, a cluster library: docs/deployment.md)",
            EXIT_BROKEN,
        )
    if _ANALYSIS.search(text):
        return CannotPass(f"Spark cannot analyse the query: {cause}; no restart changes that", EXIT_BROKEN)
    return None


def _told(error: BaseException) -> str:
    """``error``'s text with its causes' and their types' names (a JVM error's trace is its text)."""
    parts, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [type(current).__name__, str(current)]
        # as Python's traceback shows them: the cause, else the context unless suppressed
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return "\n".join(parts)


def gone_buckets(uris: Iterable[str], storage: Storage) -> str | None:
    """One line for the first bucket of ``uris`` on an object store that does not exist or
    refuses this job's credentials; None if each answers (or does not answer at all)."""
    asked: set[str] = set()
    for uri in uris:
        if not uri or "://" not in uri or uri.startswith("file:"):
            continue
        try:
            fs, path = storage.filesystem(uri)
        except Exception:  # noqa: BLE001 - a URI pyarrow cannot reach: not ours to judge here
            continue
        bucket = path.split("/", 1)[0]
        if not bucket or bucket in asked:
            continue
        asked.add(bucket)
        try:
            info = fs.get_file_info(bucket)
        except OSError as error:
            if _REFUSED.search(str(error)):
                return (
                    f"the object store refuses this job's credentials for the bucket {bucket!r} "
                    f"({uri}; revoked, or wrong): {_first_line(error)}"
                )
            continue  # no answer, a 503: may pass
        if info.type.name == "NotFound":
            return f"the bucket {bucket!r} ({uri}) does not exist (deleted, or a wrong name)"
    return None


def gone_topics(spark: Any, options: dict[str, str]) -> str | None:
    """One line for the subscribed Kafka topics the brokers no longer have, or for a login
    they refuse (None: all there, or the brokers did not answer)."""
    from .spark.formats import KafkaLoginRefused, kafka_topics

    subscribed = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
    if not subscribed:
        return None
    try:
        found = kafka_topics(spark, options)
    except KafkaLoginRefused as refused:  # credentials revoked, rights taken away
        return _naming_the_login(str(refused).split(": check", 1)[0], options)
    except Exception:  # noqa: BLE001 - the brokers did not answer (ConfigError): may pass
        return None
    missing = [t for t in subscribed if t not in found]
    if not missing:
        return None
    what = f"topic {missing[0]!r} is" if len(missing) == 1 else f"topics {', '.join(map(repr, missing))} are"
    return f"the Kafka {what} gone from {options.get('kafka.bootstrap.servers')} (deleted)"


def depended_on(
    output: str | None,
    checkpoint: str,
    config: PurgatoryConfig,
    inputs: tuple[str, str] | None,
    source_format: str,
    kafka_options: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What ``diagnose`` asks about a query: every path it reads or writes (``output`` None:
    catalog tables; ``inputs`` None: DataFrames, not asked), its Kafka inputs' topics, and the
    output topic, if any.

    >>> asked = depended_on("s3://b/out", "s3://b/chk", PurgatoryConfig(), ("ops", "evs"), "kafka")
    >>> asked["uris"], asked["kafka"], asked["output_topic"]
    (['s3://b/out', 's3://b/chk'], {'subscribe': 'ops,evs'}, None)
    """
    uris = [output, checkpoint, config.state_path, config.accumulator_staging_path]
    kafka = None
    if inputs is not None and source_format == "kafka":
        kafka = {"subscribe": ",".join(inputs), **(kafka_options or {})}
    elif inputs is not None:
        uris += inputs
    topic = None
    if config.output_kafka_topic:
        topic = (config.output_kafka_topic, dict(config.output_kafka_settings))
    return {"uris": [u for u in uris if u], "kafka": kafka, "output_topic": topic}


def diagnose(
    *,
    uris: Iterable[str],
    storage: Storage,
    spark: Any = None,
    kafka: dict[str, str] | None = None,
    output_topic: tuple[str, dict[str, str]] | None = None,
) -> PermanentFault | None:
    """After a failed run: the ``PermanentFault`` to end the job with, or None (the fault may
    pass).  ``output_topic``: the output topic's name and producer settings."""
    found = gone_buckets(uris, storage)
    if found is None and kafka is not None and spark is not None:
        found = gone_topics(spark, kafka)
    if found is None and output_topic is not None:
        from .kafka_output.health import topic_fault

        found = topic_fault(*output_topic)
    if found is None:
        return None
    return PermanentFault(
        f"{found}; the query stopped: fix it, then start the job again (it continues from its checkpoint)"
    )


#: the user a SASL login module logs in as (PLAIN, SCRAM: ``username="..."``)
_USERNAME = re.compile(r'\busername\s*=\s*"([^"]*)"')


def _naming_the_login(refused: str, options: dict[str, str]) -> str:
    """``refused`` (``Kafka at B refuses this job's login (why)``) with the user and the
    mechanism named: which credential to renew.  The user is no secret; the password next to
    it in ``kafka.sasl.jaas.config`` never leaves this function."""
    found = _USERNAME.search(options.get("kafka.sasl.jaas.config", ""))
    if found is None:
        return refused
    mechanism = options.get("kafka.sasl.mechanism", "GSSAPI")
    return refused.replace("this job's login", f"this job's login as {found.group(1)!r} ({mechanism})", 1)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
