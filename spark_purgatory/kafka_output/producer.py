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

**One producer per process, kept across sends.**  ``init_transactions`` and the marker's read
are round trips to the coordinators that a send would pay every micro-batch; instead each
process (a Python worker, or the driver for in-process sends) keeps the producer of a
``transactional.id`` after a send that committed, with the marker that commit set, and the
next send of that id uses both: ``init_transactions`` once per process, no marker read.  It
stays exactly once because a transactional producer may run one transaction after another,
and a kept producer that was not fenced is the newest of its ``transactional.id``: since its
``init_transactions`` (which read the marker, and aborted what any earlier one left open) only
it could commit, so the marker is the one it last committed.  If another process's producer
of the id initialised since (another Python worker's send, a new job, ``mark``), the kept one
is fenced: the broker refuses its records and its commit (a fatal error), nothing of it
becomes visible, and the send starts again once with a fresh producer, as above (its
``init_transactions`` fences the other in turn and aborts what it left open; the marker is
read).  A producer is kept only after a commit: any other end of a send closes it.

The records go through librdkafka's own accumulator: ``batch.size`` and ``linger.ms`` (and
every other producer setting) are ``output.kafka.<key>`` keys passed to it as they are.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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
        settings = librdkafka_settings(dict(self.producer))
        connection = {k: v for k, v in settings.items() if k.startswith(CONNECTION)}
        return {
            **connection,
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
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    own = consumer is None
    consumer = consumer or Consumer(settings.consumer_config())
    deadline = time.monotonic() + timeout_s
    try:
        while True:  # a coordinator moving or still loading answers with an error that passes
            try:
                (found,) = consumer.committed([TopicPartition(settings.topic, 0)], timeout=timeout_s)
                break
            except KafkaException as error:
                if not _passes(error.args[0]) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        if own:
            consumer.close()
    if found.error is not None:
        raise RuntimeError(f"output topic {settings.topic}: cannot read the marker: {found.error}")
    return found.offset - 1 if found.offset >= 0 else None


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


class _Clients:
    """A ``transactional.id``'s producer in this process, the consumer whose group metadata its
    transactions commit the marker with, and the marker as this producer knows it
    (``through``: read after its ``init_transactions``, then each of its commits)."""

    def __init__(self, settings: TopicSettings) -> None:
        from confluent_kafka import Consumer, Producer

        self.settings = settings
        self.producer = Producer(settings.producer_config())
        self.consumer = Consumer(settings.consumer_config())
        self.through: int | None = None

    def start(self) -> None:
        """Fence every earlier producer of the id, abort what they left open, read the marker."""
        self.producer.init_transactions(_TIMEOUT_S)
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
    """This process's kept producer of ``settings`` (None: there is none), taken out while a
    send uses it; one kept for other settings of the id is closed."""
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
    """Send the task's micro-batches after the marker in one transaction (see the module
    docstring); its ``SENT`` row: the marker after it, the batches and records it sent."""
    from confluent_kafka import KafkaException

    settings = task.settings
    gone = topic_fault(settings.topic, dict(settings.producer), timeout_s=30.0)
    if gone is not None:  # records for a topic that will not come back would wait and fail later
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
    """Is ``error`` a producer's fencing (a newer one of its ``transactional.id``)?  A fenced
    producer's calls fail fatally; ``produce`` says so as ``_FATAL``."""
    from confluent_kafka import KafkaError

    fencing = (
        KafkaError._FENCED,
        KafkaError._FATAL,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    return error.fatal() or error.code() in fencing


def _send_with(clients: _Clients, task: Send) -> pa.Table:
    """The task's batches after ``clients.through`` in one transaction; ``clients`` kept after
    its commit (or when there was nothing to send)."""
    settings, producer = task.settings, clients.producer
    done = clients.through
    todo = [(b, files) for b, files in task.batches if done is None or b > done]
    if not todo:
        _keep(clients)
        return _sent(done, 0, 0)
    producer.begin_transaction()
    count = 0
    for batch_id, files in todo:
        for table, uri in files:
            for key, value, headers in _records_of(task, table, uri, batch_id):
                _produce(producer, settings.topic, key, value, headers)
                count += 1
    through = todo[-1][0]
    _commit(producer, clients.consumer, settings, through)
    clients.through = through
    _keep(clients)
    return _sent(through, len(todo), count)


def mark(settings: TopicSettings, batch_id: int) -> None:
    """Commit the marker alone at ``batch_id`` (a transaction without records): where a topic
    configured on a running checkpoint starts, or a batch that had nothing for it.  Its
    producer fences this process's kept one (closed here)."""
    kept = _take(settings)
    if kept is not None:
        kept.close()
    clients = _Clients(settings)
    try:
        clients.producer.init_transactions(_TIMEOUT_S)
        clients.producer.begin_transaction()
        _commit(clients.producer, clients.consumer, settings, batch_id)
    finally:
        clients.close()


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
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            try:
                producer.commit_transaction(_TIMEOUT_S)
                return
            except KafkaException as error:
                if not error.args[0].retriable() or time.monotonic() > deadline:
                    raise
    except KafkaException as error:
        if error.args[0].txn_requires_abort():
            producer.abort_transaction(_TIMEOUT_S)
        raise


def _sent(through: int | None, batches: int, count: int) -> pa.Table:
    return pa.table({"through": [through], "batches": [batches], "records": [count]}, schema=SENT)
