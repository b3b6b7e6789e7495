"""The output topic's producer: one Kafka transaction per send, the micro-batch in it.

A **send** covers the recorded micro-batches the topic has not had yet: their staged files
(the rows the Delta tables get, ``delta.staging``) are read where the task runs, each row of
a status the topic takes becomes a record (``records``), and the transaction that carries
them also commits **the marker**: the offset ``batch_id + 1`` of the checkpoint's own
consumer group (``spark-purgatory-<checkpoint id>``) on the output topic's partition 0, with
``batch <id>`` as its metadata, through ``send_offsets_to_transaction``.  Records and marker
are visible together or not at all.

Exactly once for ``isolation.level=read_committed`` consumers rests on three facts:

* the rows of a recorded micro-batch never change (``delta.accumulator``: the first staging
  recorded is the one; a replay's rows are swept), so a send of batch N always carries the
  same records;
* a send reads the marker after ``init_transactions``, with ``isolation.level=
  read_committed`` (Kafka then waits for a pending transactional offset: KIP-447), and skips
  every batch at or below it: a task retried after its transaction committed, a replayed
  micro-batch, a restarted job send nothing twice;
* one ``transactional.id`` per checkpoint (``spark-purgatory-<checkpoint id>``): a send's
  ``init_transactions`` fences every earlier producer of the checkpoint (a zombie task, a
  killed job's executor) and aborts its open transaction, so nothing half sent ever becomes
  visible.

A ``read_uncommitted`` consumer also sees aborted records: at least once for it.

The records go through librdkafka's own accumulator: ``batch.size`` and ``linger.ms`` (and
every other producer setting) are ``output.kafka.<key>`` keys passed to it as they are.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..contract import OUTCOMES, REJECTED
from ..storage import Storage
from .health import TopicGone, topic_fault
from .records import MAX_RECORD_BYTES, REJECTED_STATUS, records

__all__ = ["TopicSettings", "Send", "SENT", "SENT_DDL", "send", "committed_batch", "mark"]

#: librdkafka's own lines (a coordinator still loading, a broker gone for a while), as records
log = logging.getLogger(__name__)

#: the producer's settings that are ours, whatever the configuration says
_TRANSACTIONS = {"enable.idempotence": "true"}
#: Kafka's Java clients hash keys with murmur2: the same key lands in the same partition
_DEFAULTS = {"partitioner": "murmur2_random"}
#: the settings a consumer (the marker's reader) shares with the producer: where and how to connect
CONNECTION = ("bootstrap.servers", "security.protocol", "sasl.", "ssl.", "client.", "socket.", "broker.")
#: how long a transaction's calls may wait for the broker (an outage is ridden out within it)
_TIMEOUT_S = 120.0
T = TypeVar("T")

#: what a send task returns: one row
SENT = pa.schema([("through", pa.int64()), ("batches", pa.int64()), ("records", pa.int64())])
SENT_DDL = "through BIGINT, batches BIGINT, records BIGINT"


@dataclass(frozen=True)
class TopicSettings:
    """Where the outcomes go: ``output.kafka.topic``, ``output.kafka.statuses`` and the
    producer's settings (``output.kafka.<key>``, librdkafka's names), for one checkpoint."""

    topic: str
    statuses: tuple[str, ...]
    producer: tuple[tuple[str, str], ...]
    checkpoint_id: str

    @property
    def transactional_id(self) -> str:
        """One per checkpoint: each send fences the ones before it."""
        return f"spark-purgatory-{self.checkpoint_id}"

    @property
    def marker_group(self) -> str:
        """The consumer group whose offset on the topic's partition 0 is the marker."""
        return f"spark-purgatory-{self.checkpoint_id}"

    def producer_config(self) -> dict[str, Any]:
        own = {**_TRANSACTIONS, "transactional.id": self.transactional_id}
        return {**_DEFAULTS, **librdkafka_settings(dict(self.producer)), **own, "logger": log}

    def consumer_config(self) -> dict[str, Any]:
        return {
            **connection_settings(dict(self.producer)),
            "logger": log,
            "group.id": self.marker_group,
            "isolation.level": "read_committed",
            "enable.auto.commit": "false",
        }


_JAAS = re.compile(r'(username|password)\s*=\s*"([^"]*)"')


def librdkafka_settings(settings: dict[str, str]) -> dict[str, str]:
    """The producer's settings in librdkafka's names, the Java clients' security keys the
    inputs use (``kafka.*``) taken as well: ``sasl.jaas.config``'s username and password
    (PLAIN and SCRAM login modules) become ``sasl.username``/``sasl.password``, a PEM
    truststore (``ssl.truststore.type=PEM``) becomes ``ssl.ca.location``.

    >>> librdkafka_settings({"sasl.jaas.config": 'x.ScramLoginModule required username="ana" password="pw";',
    ...                      "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM"})
    {'sasl.username': 'ana', 'sasl.password': 'pw', 'ssl.ca.location': '/ca.pem'}
    """
    out = dict(settings)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        found = dict(_JAAS.findall(jaas))
        for name in ("username", "password"):
            if name in found:
                out.setdefault(f"sasl.{name}", found[name])
    if str(out.get("ssl.truststore.type", "")).upper() == "PEM" and "ssl.truststore.location" in out:
        out.setdefault("ssl.ca.location", out.pop("ssl.truststore.location"))
        out.pop("ssl.truststore.type")
    return out


def connection_settings(settings: dict[str, str]) -> dict[str, str]:
    """Where and how to connect, of the producer's settings (librdkafka's names): what the
    marker's consumer and the topic's health check share with the producer."""
    return {k: v for k, v in librdkafka_settings(settings).items() if k.startswith(CONNECTION)}


@dataclass(frozen=True)
class Send:
    """One send task: the micro-batches after the marker, each with its staged files' URIs."""

    settings: TopicSettings
    batches: tuple[tuple[int, tuple[tuple[str, str], ...]], ...]  # (batch_id, ((table, uri), ...))
    storage: Storage


def committed_batch(
    settings: TopicSettings, *, consumer: Any = None, timeout_s: float = _TIMEOUT_S
) -> int | None:
    """The last micro-batch the topic has (the marker), None if it never had one."""
    from confluent_kafka import Consumer, TopicPartition

    own = consumer is None
    consumer = consumer or Consumer(settings.consumer_config())
    try:  # a coordinator moving or still loading answers with an error that passes
        (found,) = _retried(
            lambda: consumer.committed([TopicPartition(settings.topic, 0)], timeout=timeout_s),
            _passes,
            timeout_s,
        )
    finally:
        if own:
            consumer.close()
    if found.error is not None:
        raise RuntimeError(f"output topic {settings.topic}: cannot read the marker: {found.error}")
    return found.offset - 1 if found.offset >= 0 else None


def _retried(call: Callable[[], T], passes: Callable[[Any], bool], timeout_s: float) -> T:
    """``call()``, again after a pause while it fails with an error ``passes`` lets pass, for
    up to ``timeout_s``; then (or on another error) its ``KafkaException`` is raised."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as error:
            if not passes(error.args[0]) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _passes(error: Any) -> bool:
    """Does waiting help?  The client's own flag, or a group coordinator moving or loading
    (``NOT_COORDINATOR`` is not flagged retriable on a committed-offsets fetch)."""
    from confluent_kafka import KafkaError

    moving = (
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    )
    return error.retriable() or error.code() in moving


def send(task: Send) -> pa.Table:
    """Send the task's micro-batches after the marker in one transaction (see the module
    docstring); its ``SENT`` row: the marker after it, the batches and records it sent."""

    settings = task.settings
    gone = topic_fault(settings.topic, dict(settings.producer), timeout_s=30.0)
    if gone is not None:  # records for a topic that will not come back would wait and fail later
        raise TopicGone(gone)
    with _transactional(settings) as (producer, consumer):
        done = committed_batch(settings, consumer=consumer)
        todo = [(b, files) for b, files in task.batches if done is None or b > done]
        if not todo:
            return _sent(done, 0, 0)
        producer.begin_transaction()
        count = 0
        for batch_id, files in todo:
            for table, uri in files:
                for key, value, headers in _records_of(task, table, uri, batch_id):
                    _produce(producer, settings.topic, key, value, headers)
                    count += 1
        through = todo[-1][0]
        _commit(producer, consumer, settings, through)
        return _sent(through, len(todo), count)


def mark(settings: TopicSettings, batch_id: int) -> None:
    """Commit the marker alone at ``batch_id`` (a transaction without records): where a topic
    with no marker yet starts (``topic.TopicOutput.open``)."""
    with _transactional(settings) as (producer, consumer):
        producer.begin_transaction()
        _commit(producer, consumer, settings, batch_id)


@contextlib.contextmanager
def _transactional(settings: TopicSettings) -> Iterator[tuple[Any, Any]]:
    """The checkpoint's transactional producer, its transactions initialised (which fences
    earlier producers and aborts what they left open), and the marker's consumer."""
    from confluent_kafka import Consumer, Producer

    producer = Producer(settings.producer_config())
    consumer = Consumer(settings.consumer_config())
    try:
        producer.init_transactions(_TIMEOUT_S)
        yield producer, consumer
    finally:
        producer.flush(0)
        consumer.close()


def _records_of(task: Send, table: str, uri: str, batch_id: int) -> Iterable:
    """One staged file's records, of the statuses the topic takes."""
    statuses = task.settings.statuses
    fs, path = task.storage.filesystem(uri)
    rows = pq.read_table(path, filesystem=fs)
    if table == REJECTED.name:
        if REJECTED_STATUS not in statuses:
            return ()
        return records(REJECTED.conformed(rows), REJECTED_STATUS, **_about(task, batch_id))
    rows = OUTCOMES.conformed(rows)
    rows = rows.filter(pc.is_in(rows.column("status"), pa.array(list(statuses), pa.string())))
    return records(rows, None, **_about(task, batch_id))


def _about(task: Send, batch_id: int) -> dict:
    limit = int(dict(task.settings.producer).get("message.max.bytes", MAX_RECORD_BYTES))
    return {"checkpoint": task.settings.checkpoint_id, "batch_id": batch_id, "max_bytes": limit}


def _produce(producer: Any, topic: str, key: bytes | None, value: bytes, headers: list) -> None:
    """Hand one record to librdkafka's accumulator, waiting while its queue is full."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


def _commit(producer: Any, consumer: Any, settings: TopicSettings, batch_id: int) -> None:
    """The marker into the open transaction, then its commit (retried while the broker says
    it may pass; aborted, and the error raised, when the transaction cannot commit)."""
    from confluent_kafka import KafkaException, TopicPartition

    marker = TopicPartition(settings.topic, 0, batch_id + 1, f"batch {batch_id}")
    try:
        producer.send_offsets_to_transaction([marker], consumer.consumer_group_metadata(), _TIMEOUT_S)
        _retried(lambda: producer.commit_transaction(_TIMEOUT_S), lambda e: e.retriable(), _TIMEOUT_S)
    except KafkaException as error:
        if error.args[0].txn_requires_abort():
            producer.abort_transaction(_TIMEOUT_S)
        raise


def _sent(through: int | None, batches: int, count: int) -> pa.Table:
    return pa.table({"through": [through], "batches": [batches], "records": [count]}, schema=SENT)
