"""The output topic's producer: one Kafka transaction per send, the micro-batch in it.

A **send** covers the recorded micro-batches the topic has not had yet: each row of a status
the topic takes becomes a record (``records``), and the same transaction commits **the
marker**: offset ``batch_id + 1`` of the checkpoint's own consumer group on the topic's
partition 0 (``send_offsets_to_transaction``).  Records and marker are visible together or
not at all.

Exactly once for ``read_committed`` consumers rests on three facts:

* the rows of a recorded micro-batch never change, so a send of batch N always carries the
  same records;
* a send reads the marker after ``init_transactions`` (KIP-447) and skips every batch at or
  below it: a retried task or a replayed micro-batch sends nothing twice;
* one ``transactional.id`` per checkpoint: ``init_transactions`` fences every earlier
  producer of the checkpoint and aborts its open transaction.

A ``read_uncommitted`` consumer also sees aborted records: at least once for it.

**One producer per process, kept across sends**, with the marker its last commit set.  If
another process's producer of the id initialised since, the kept one is fenced: nothing of
it becomes visible (a transaction adds its marker before its records), and the send starts
again with a fresh producer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..contract import OUTCOMES
from ..storage import Storage
from .client_settings import EAGER, connection_settings, librdkafka_settings
from .health import TopicGone, topic_fault
from .records import MAX_RECORD_BYTES, WHOLE_TABLES, records

#: librdkafka's own lines (a coordinator still loading, a broker gone for a while), as records
log = logging.getLogger(__name__)


class _QuietFencing(logging.Filter):
    """librdkafka's lines about a fenced producer (logged as fatal errors) at INFO: the design
    at work (module docstring), not a fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO and "fenced by a newer instance" in record.getMessage():
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


log.addFilter(_QuietFencing())

#: the producer's settings that are ours, whatever the configuration says
_TRANSACTIONS = {"enable.idempotence": "true"}
#: Kafka's Java clients hash keys with murmur2: the same key lands in the same partition
_DEFAULTS = {"partitioner": "murmur2_random", **EAGER}
#: how long a transaction's calls may wait for the broker (an outage is ridden out within it)
_TIMEOUT_S = 120.0
#: how long a fresh producer waits for its first connection before it initialises anyway
_WARM_UP_S = 10.0
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
    up to ``timeout_s``."""
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
    """Does waiting help?  The client's flag, or a group coordinator moving or loading
    (not flagged retriable on a committed-offsets fetch)."""
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


class _Clients:
    """A ``transactional.id``'s producer in this process, the consumer whose group metadata its
    transactions commit the marker with, and the marker as this producer knows it."""

    def __init__(self, settings: TopicSettings) -> None:
        from confluent_kafka import Consumer, Producer

        self.settings = settings
        self.producer = Producer(settings.producer_config())
        self.consumer = Consumer(settings.consumer_config())
        self.through: int | None = None

    def start(self, *, read_marker: bool = True) -> None:
        """Fence every earlier producer of the id and abort what they left open, then read the
        marker.  The producer connects first, so that its coordinator's connection is up."""
        from confluent_kafka import KafkaException

        try:
            self.producer.list_topics(self.settings.topic, timeout=_WARM_UP_S)
        except KafkaException:
            pass  # no answer yet: init_transactions waits for the brokers itself
        self.producer.init_transactions(_TIMEOUT_S)
        if read_marker:
            self.through = committed_batch(self.settings, consumer=self.consumer)

    def close(self) -> None:
        from confluent_kafka import KafkaException

        try:
            self.producer.flush(0)  # the callbacks due (librdkafka's lines); a fenced one raises
        except KafkaException:
            pass
        finally:
            self.consumer.close()


#: each ``transactional.id``'s kept producer in this process (the module docstring)
_KEPT: dict[str, _Clients] = {}
_KEPT_LOCK = threading.Lock()


def _take(settings: TopicSettings) -> _Clients | None:
    """This process's kept producer of ``settings``, taken out while a send uses it; one kept
    for other settings of the id is closed."""
    with _KEPT_LOCK:
        kept = _KEPT.pop(settings.transactional_id, None)
    if kept is not None and kept.settings != settings:
        kept.close()
        return None
    return kept


def _keep(clients: _Clients) -> None:
    with _KEPT_LOCK:
        earlier = _KEPT.get(clients.settings.transactional_id)
        _KEPT[clients.settings.transactional_id] = clients
    if earlier is not None:
        earlier.close()


def send(task: Send) -> pa.Table:
    """Send the task's micro-batches after the marker in one transaction; its ``SENT`` row.

    The topic is checked first, on a client of its own (a kept producer's connection would
    not see a revoked login): a deleted topic or a refused login raises ``TopicGone`` and
    closes the kept producer, which would go on retrying."""
    from confluent_kafka import KafkaException

    settings = task.settings
    gone = topic_fault(settings.topic, dict(settings.producer), timeout_s=30.0)
    if gone is not None:
        kept = _take(settings)
        if kept is not None:
            kept.close()
        raise TopicGone(gone)
    kept = _take(settings)
    if kept is not None:
        try:
            return _send_with(kept, task)
        except KafkaException as error:
            kept.close()
            if not _fenced(error.args[0]):
                raise
            log.info("the kept producer of %s was fenced: a fresh one", settings.transactional_id)
        except BaseException:
            kept.close()
            raise
    clients = _Clients(settings)
    try:
        clients.start()
        return _send_with(clients, task)
    except BaseException:
        clients.close()
        raise


def _fenced(error: Any) -> bool:
    """Is ``error`` a producer's fencing (a newer one of its ``transactional.id``)?"""
    from confluent_kafka import KafkaError

    fencing = (
        KafkaError._FENCED,
        KafkaError._FATAL,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    return error.fatal() or error.code() in fencing


def _send_with(clients: _Clients, task: Send) -> pa.Table:
    """The task's batches after ``clients.through`` in one transaction, the marker first;
    ``clients`` kept after its commit (or when there was nothing to send)."""
    settings, producer = task.settings, clients.producer
    done = clients.through
    todo = [(b, files) for b, files in task.batches if done is None or b > done]
    if not todo:
        _keep(clients)
        return _sent(done, 0, 0)
    through = todo[-1][0]
    producer.begin_transaction()
    _add_marker(producer, clients.consumer, settings, through)
    count = 0
    for batch_id, files in todo:
        for table, uri in files:
            for key, value, headers in _records_of(task, table, uri, batch_id):
                _produce(producer, settings.topic, key, value, headers)
                count += 1
    _commit(producer)
    clients.through = through
    _keep(clients)
    return _sent(through, len(todo), count)


def mark(settings: TopicSettings, batch_id: int) -> None:
    """Commit the marker alone at ``batch_id``: where a topic with no marker yet starts."""
    kept = _take(settings)
    if kept is not None:
        kept.close()
    clients = _Clients(settings)
    try:
        clients.start(read_marker=False)
        clients.producer.begin_transaction()
        _add_marker(clients.producer, clients.consumer, settings, batch_id)
        _commit(clients.producer)
    finally:
        clients.close()


def _records_of(task: Send, table: str, uri: str, batch_id: int) -> Iterable:
    """One staged file's records, of the statuses the topic takes."""
    statuses = task.settings.statuses
    fs, path = task.storage.filesystem(uri)
    rows = pq.read_table(path, filesystem=fs)
    for status, whole in WHOLE_TABLES.items():
        if table == whole.name:
            wanted = status in statuses
            return records(whole.conformed(rows), status, **_about(task, batch_id)) if wanted else ()
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


def _add_marker(producer: Any, consumer: Any, settings: TopicSettings, batch_id: int) -> None:
    """The marker (``batch_id + 1`` on partition 0 for the checkpoint's group) into the open
    transaction: committed with its records or not at all."""
    from confluent_kafka import TopicPartition

    marker = TopicPartition(settings.topic, 0, batch_id + 1, f"batch {batch_id}")
    _aborting(
        producer,
        lambda: producer.send_offsets_to_transaction(
            [marker], consumer.consumer_group_metadata(), _TIMEOUT_S
        ),
    )


def _commit(producer: Any) -> None:
    """Commit the open transaction (retried while the broker says it may pass)."""
    _aborting(
        producer,
        lambda: _retried(
            lambda: producer.commit_transaction(_TIMEOUT_S), lambda e: e.retriable(), _TIMEOUT_S
        ),
    )


def _aborting(producer: Any, call: Callable[[], Any]) -> None:
    """``call()``; the transaction aborted when it fails and cannot go on."""
    from confluent_kafka import KafkaException

    try:
        call()
    except KafkaException as error:
        if error.args[0].txn_requires_abort():
            producer.abort_transaction(_TIMEOUT_S)
        raise


def _sent(through: int | None, batches: int, count: int) -> pa.Table:
    return pa.table({"through": [through], "batches": [batches], "records": [count]}, schema=SENT)
