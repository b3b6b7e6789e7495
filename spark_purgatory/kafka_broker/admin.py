"""What a client does on the loopback broker: topics, SCRAM users and records.

``BrokerClients`` is the half of ``KafkaBroker`` that talks to a running broker through
``confluent-kafka`` on its ``PLAINTEXT`` listener.

Invariant: each call returns once the broker has done it (a topic listed or gone, every
record acknowledged by the one replica), so a test's next step sees it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence


class KafkaBrokerError(RuntimeError):
    """The broker cannot be started: no Java, no JARs, or it failed (its log's tail attached)."""


class BrokerClients:
    """Topics, SCRAM users and records on a broker that serves ``bootstrap_servers``."""

    _admin = None

    @property
    def bootstrap_servers(self) -> str:  # pragma: no cover - the broker's own
        raise NotImplementedError

    def admin(self):
        """A ``confluent_kafka.admin.AdminClient`` on this broker."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        return self._admin

    def create_topic(
        self, name: str, partitions: int = 1, *, config: dict[str, str] | None = None, timeout: float = 30.0
    ) -> str:
        """Create ``name`` with ``partitions`` partitions and the topic ``config`` given (e.g.
        ``{"retention.ms": "-1"}`` for records with old timestamps); return it."""
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
        futures = self.admin().create_topics([topic], operation_timeout=timeout)
        futures[name].result(timeout)
        self._await_topic(name, present=True, timeout=timeout)
        return name

    def add_scram_user(self, user: str, password: str, *, timeout: float = 30.0) -> None:
        """Make (or change) ``user`` with ``password`` for the SCRAM-SHA-256 listener."""
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        futures = self.admin().alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, info, password.encode())], request_timeout=timeout
        )
        for future in futures.values():
            future.result(timeout)

    def remove_scram_user(self, user: str, *, timeout: float = 30.0) -> None:
        """Revoke ``user``'s SCRAM-SHA-256 credential: its next login is refused."""
        from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

        futures = self.admin().alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)], request_timeout=timeout
        )
        for future in futures.values():
            future.result(timeout)

    def delete_topic(self, name: str, *, timeout: float = 30.0) -> None:
        """Delete ``name`` and wait until the broker no longer lists it."""
        futures = self.admin().delete_topics([name], operation_timeout=timeout)
        futures[name].result(timeout)
        self._await_topic(name, present=False, timeout=timeout)

    def produce(
        self,
        topic: str,
        values: Sequence[str | bytes],
        *,
        partitions: Sequence[int] | int | None = None,
        keys: Sequence[str | bytes | None] | None = None,
        headers: dict[str, str] | None = None,
    ) -> int:
        """Write ``values`` to ``topic`` in order and wait until the broker has them all;
        ``partitions``: one for all, one per value, or None (by key).  Returns the count."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap_servers, "linger.ms": 20, "acks": "all"})
        failed: list[str] = []

        def delivered(error, _message) -> None:
            if error is not None:
                failed.append(str(error))

        for i, value in enumerate(values):
            options: dict = {"on_delivery": delivered}
            if isinstance(partitions, int):
                options["partition"] = partitions
            elif partitions is not None:
                options["partition"] = int(partitions[i])
            if keys is not None and keys[i] is not None:
                options["key"] = keys[i]
            if headers:
                options["headers"] = headers
            while True:
                try:
                    producer.produce(topic, value, **options)
                    break
                except BufferError:  # the producer's queue is full: let it send
                    producer.poll(0.1)
        remaining = producer.flush(60)
        if remaining or failed:
            raise KafkaBrokerError(f"producing to {topic!r}: {remaining} undelivered, errors {failed[:3]}")
        return len(values)

    def _await_topic(self, name: str, *, present: bool, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            topics = self.admin().list_topics(timeout=timeout).topics
            listed = name in topics and topics[name].error is None and bool(topics[name].partitions)
            if listed == present:
                return
            time.sleep(0.1)
        raise KafkaBrokerError(f"topic {name!r} still {'absent' if present else 'present'} after {timeout} s")
