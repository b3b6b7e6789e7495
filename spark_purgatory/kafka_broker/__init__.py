"""A real Apache Kafka broker on loopback, started from the project's pinned JARs: one Kafka 4
node in KRaft mode (``process``), its clients (``admin``), TLS (``tls``), a command line.

Example::

    from spark_purgatory.kafka_broker import KafkaBroker

    with KafkaBroker() as broker:                  # formats, starts, waits until it serves
        print(broker.bootstrap_servers)            # 127.0.0.1:<free port>
        broker.create_topic("operations", partitions=3)
"""

from .admin import KafkaBrokerError
from .process import BROKER_JARS, KafkaBroker, die_with_parent, free_port
from .terminal import main, running_at, stop_at

__all__ = [
    "BROKER_JARS",
    "KafkaBroker",
    "KafkaBrokerError",
    "die_with_parent",
    "free_port",
    "main",
    "running_at",
    "stop_at",
]
