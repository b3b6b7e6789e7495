"""The output topic: the outcomes on a Kafka topic beside the Delta tables, exactly once for
``isolation.level=read_committed`` consumers (``docs/kafka-output.md``).

The Delta tables stay the record of truth: the topic gets the rows they get, read from the
same staged files before a drain takes them.  The argument for exactly once is
``producer``'s module docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .producer import TopicSettings, committed_batch
from .records import STATUSES, records
from .topic import TopicOutput

if TYPE_CHECKING:
    from ..config import PurgatoryConfig
    from ..storage import Storage

__all__ = [
    "STATUSES",
    "TopicOutput",
    "TopicSettings",
    "committed_batch",
    "records",
    "settings_of",
    "topic_output",
]


def settings_of(config: PurgatoryConfig, checkpoint_id: str) -> TopicSettings | None:
    """The output topic's settings for a checkpoint (None: no ``output.kafka.topic``)."""
    if not config.output_kafka_topic:
        return None
    return TopicSettings(
        topic=config.output_kafka_topic,
        statuses=config.output_kafka_status_list,
        producer=tuple(config.output_kafka_settings),
        checkpoint_id=checkpoint_id,
    )


def topic_output(config: PurgatoryConfig, checkpoint_id: str, storage: Storage) -> TopicOutput | None:
    """The sink's output topic for a checkpoint (None: no ``output.kafka.topic``)."""
    settings = settings_of(config, checkpoint_id)
    if settings is None:
        return None
    try:
        import confluent_kafka  # noqa: F401 - the executors need it too: the same environment
    except ImportError:
        from ..config import ConfigError

        raise ConfigError(
            "output.kafka.topic needs confluent-kafka: pip install 'spark-purgatory[kafka]'"
        ) from None
    return TopicOutput(settings, storage)
