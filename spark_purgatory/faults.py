"""Permanent faults: something a failed run needs is gone, said in one line.

A run that fails is started again by the job's restart policy (``restarts``) when the fault
may pass: a broker restarting, a store answering ``503 SlowDown``, a dropped connection.
Some faults do not pass by waiting: a bucket deleted, credentials revoked, a Kafka topic
deleted.  After a failure the job, and the handle of ``start`` (``await_termination``,
``stop``), ask each resource the query depends on, once (``diagnose``): a bucket (or ADLS
container) of any path on an object store, and the Kafka topics it reads.  One that answers
"no such bucket", "access denied", "no such topic" or "login refused" ends the job at once
with ``PermanentFault``, one line naming the resource and what to do, instead of restarts
that would meet the same answer; the handle raises it in place of the failure's own error.

Asking changes nothing: the failed run stopped between micro-batches like any stop, so a
start after the fix continues from the checkpoint, exactly once (what was staged but not
committed is committed then).

Invariant: a resource that does not answer (a timeout, a 503, a broker away) is never called
gone: that is a fault that may pass, left to the restart policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .config import PurgatoryConfig
from .spark.errors import MicroBatchError
from .storage import Storage

__all__ = ["PermanentFault", "diagnose", "depended_on", "gone_buckets", "gone_topics"]

#: what a store answers to credentials it does not accept (S3, ADLS, GCS)
_REFUSED = re.compile(
    r"ACCESS_DENIED|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|ExpiredToken|InvalidToken"
    r"|AuthenticationFailed|AuthorizationFailure|\b403\b",
)


class PermanentFault(MicroBatchError):
    """A failed run's cause that no restart fixes; the message is one line naming it.

    A ``MicroBatchError``: what ``PurgatoryQuery.await_termination`` raises for a micro-batch
    that failed on it (``start``'s handle asks ``diagnose`` after a failure, as the job does).
    """


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
    """What ``diagnose`` asks about a query (its ``uris`` and ``kafka``): every path it reads
    or writes, the output (None: catalog tables), the checkpoint, the shard state and the
    staging; and its two inputs (None: given as DataFrames, not asked), as paths, or, read
    from Kafka, as the topics subscribed with ``kafka_options``.

    >>> asked = depended_on("s3://b/out", "s3://b/chk", PurgatoryConfig(), ("ops", "evs"), "kafka")
    >>> asked["uris"], asked["kafka"]
    (['s3://b/out', 's3://b/chk'], {'subscribe': 'ops,evs'})
    """
    uris = [output, checkpoint, config.state_path, config.accumulator_staging_path]
    kafka = None
    if inputs is not None and source_format == "kafka":
        kafka = {"subscribe": ",".join(inputs), **(kafka_options or {})}
    elif inputs is not None:
        uris += inputs
    return {"uris": [u for u in uris if u], "kafka": kafka}


def diagnose(
    *, uris: Iterable[str], storage: Storage, spark: Any = None, kafka: dict[str, str] | None = None
) -> PermanentFault | None:
    """After a failed run: the ``PermanentFault`` to end the job with, or None (the fault may
    pass: the restart policy decides)."""
    found = gone_buckets(uris, storage)
    if found is None and kafka is not None and spark is not None:
        found = gone_topics(spark, kafka)
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
