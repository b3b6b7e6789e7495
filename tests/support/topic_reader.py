"""The output topic as its consumers read it: every record from the start, with
``isolation.level=read_committed`` (what exactly once is promised to) or ``read_uncommitted``."""

from __future__ import annotations

import json
import uuid

from spark_purgatory.kafka_output.records import HEADER_STATUS


def read_topic(bootstrap_servers: str, topic: str, *, committed: bool = True, quiet_s: float = 3.0) -> list:
    """Every record of ``topic``'s partitions from their start (``confluent_kafka.Message``s),
    until none came for ``quiet_s``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.auto.commit": "false",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])  # -2: the beginning
        got = []
        while True:
            message = consumer.poll(quiet_s)
            if message is None:
                return got
            assert message.error() is None, message.error()
            got.append(message)
    finally:
        consumer.close()


def status_of(message) -> str:
    """A record's ``purgatory.status`` header."""
    return dict(message.headers())[HEADER_STATUS].decode()


def outcomes_of(messages) -> list[tuple[str, str, str]]:
    """The outcome records as (op_id, status, resolved_at) in their order (rejected rows and
    warnings left out)."""
    out = []
    for m in messages:
        if status_of(m) not in ("rejected", "warning"):
            value = json.loads(m.value())
            out.append((value["op_id"], value["status"], value["resolved_at"]))
    return out
