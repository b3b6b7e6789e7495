"""Configuration: Kafka-style dotted keys, validated once, carried as frozen dataclasses.

Every key has a default; unknown keys and bad values raise ``ConfigError`` at start-up naming
the key and what is allowed, so a typo never silently falls back to a default.

>>> cfg = PurgatoryConfig.from_mapping({"purgatory.tick.ms": "250", "watermark.delay": "5 seconds"})
>>> cfg.tick_ms, cfg.watermark_delay_ms
(250, 5000)
"""

from __future__ import annotations

import difflib
import logging
import numbers
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

import numpy as np

from .contract import (
    CANCELLED,
    COMPLETED,
    DEEPEST_MAX_DEPTH,
    EXPIRED,
    KIND_REJECTED,
    KIND_WARNING,
    MAX_DEPTH,
    MAX_FUTURE_MS,
    MAX_KEYS,
    MAX_MEMBERS,
    MAX_RECORD_BYTES,
    MAX_TIMEOUT_MS,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
)

__all__ = [
    "ConfigError",
    "InputLimits",
    "PurgatoryConfig",
    "READ_FORMATS",
    "SecretFilter",
    "parse_interval_ms",
    "scrubbed",
    "secret_values",
]

#: how a source path is read (``job.source.format``; ``auto``: told by its files)
READ_FORMATS = ("auto", "json", "parquet", "delta", "kafka")


class ConfigError(ValueError):
    """A configuration key is unknown or its value is not allowed."""


_UNITS_MS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}
_UNIT_ALIASES = {"ms": "millisecond", "s": "second", "sec": "second", "min": "minute", "h": "hour"}
_INTERVAL = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")


def parse_interval_ms(text: str) -> int:
    """Parse a Spark interval string such as ``"10 seconds"`` or ``"1 minute"`` into ms.

    >>> parse_interval_ms("10 seconds"), parse_interval_ms("500 ms"), parse_interval_ms("2 hours")
    (10000, 500, 7200000)
    """
    match = _INTERVAL.match(str(text).lower())
    if not match:
        raise ConfigError(f"not an interval: {text!r} (expected e.g. '10 seconds', '500 ms')")
    amount, unit = int(match.group(1)), match.group(2)
    if unit not in _UNIT_ALIASES and unit not in _UNITS_MS and unit.endswith("s"):
        unit = unit[:-1]  # plural
    unit = _UNIT_ALIASES.get(unit, unit)
    if unit not in _UNITS_MS:
        raise ConfigError(f"unknown interval unit in {text!r}; allowed: {', '.join(_UNITS_MS)}")
    return amount * _UNITS_MS[unit]


@dataclass(frozen=True)
class InputLimits:
    """How big an input record may be before it is rejected as poison (``input.max.*``): its
    text in UTF-8 bytes, its nesting of arrays and objects (JSON text only), an operation's
    distinct keys and members."""

    record_bytes: int = MAX_RECORD_BYTES
    depth: int = MAX_DEPTH
    keys: int = MAX_KEYS
    members: int = MAX_MEMBERS

    def bounds(self, max_timeout_ms: int | None = None, max_future_ms: int | None = None) -> dict:
        """The limits as the checks name them (None turns a check off)."""
        return {
            "input.max.record.bytes": int(self.record_bytes),
            "input.max.depth": int(self.depth),
            "input.max.keys": int(self.keys),
            "input.max.members": int(self.members),
            "purgatory.max.timeout.ms": None if max_timeout_ms is None else int(max_timeout_ms),
            "purgatory.max.future.ms": None if max_future_ms is None else int(max_future_ms),
        }


@dataclass(frozen=True)
class PurgatoryConfig:
    """All settings of the purgatory, the accumulator and the job, with their dotted keys.

    Build it with ``PurgatoryConfig.from_mapping({...dotted keys...})``; ``_FIELDS_BY_KEY``
    maps each dotted key to its field.
    """

    tick_ms: int = 100
    wheel_size: int = 512
    shards: int = 2
    max_timeout_ms: int = MAX_TIMEOUT_MS
    progress_retention_ms: int = 86_400_000
    dedup_retention_ms: int = 600_000
    dedup_scope: str = "global"
    watermark_delay: str = "10 seconds"
    watermark_delay_operations: str = ""
    watermark_delay_events: str = ""
    watermark_idle_timeout: str = ""
    deadline_clock: str = "event"
    accumulator_batch_size: int = 128 * 1024 * 1024
    accumulator_linger_ms: int = 10_000
    accumulator_buffer_memory: int = 512 * 1024 * 1024
    accumulator_staging_path: str = ""
    source_max_files_per_trigger: int = 16
    cross_shard_operations: bool = True
    cross_shard_handoff: str = "mailbox"
    shard_key_delimiter: str = ""
    max_future_ms: int = MAX_FUTURE_MS
    state_path: str = ""
    state_segment_rows: int = 100_000
    state_retain_versions: int = 100
    storage_endpoint: str = ""
    storage_region: str = ""
    storage_allow_http: bool = False
    storage_s3_conditional_put: str = "etag"
    storage_retries: int = 10
    stop_timeout_ms: int = 60_000
    output_take_over: bool = False
    input_max_record_bytes: int = MAX_RECORD_BYTES
    input_max_depth: int = MAX_DEPTH
    input_max_keys: int = MAX_KEYS
    input_max_members: int = MAX_MEMBERS
    output_kafka_topic: str = ""
    output_kafka_statuses: str = EXPIRED
    #: the output topic's producer settings, ``output.kafka.<key>`` without the prefix, sorted
    output_kafka_settings: tuple = ()

    @property
    def groups(self) -> int:
        """The shard groups: one per primary shard and the cross-shard group (number
        ``shards``).  Also the query's ``spark.sql.shuffle.partitions``, which Spark fixes in
        the checkpoint.

        >>> PurgatoryConfig(shards=8).groups
        9
        """
        return self.shards + 1

    @staticmethod
    def shards_in(groups: int) -> int:
        """The primary shards of a layout of ``groups`` shard groups (the inverse of ``groups``).

        >>> PurgatoryConfig.shards_in(PurgatoryConfig(shards=8).groups)
        8
        """
        return groups - 1

    @property
    def watermark_delay_ms(self) -> int:
        return parse_interval_ms(self.watermark_delay)

    def input_delay_ms(self, source: str) -> int:
        """The watermark delay of one input (``operations`` or ``events``): its own
        ``watermark.delay.<source>`` when set, else ``watermark.delay``.

        >>> PurgatoryConfig(watermark_delay_events="30 seconds").input_delay_ms("events")
        30000
        >>> PurgatoryConfig(watermark_delay_events="30 seconds").input_delay_ms("operations")
        10000
        """
        own = {SOURCE_OPERATIONS: self.watermark_delay_operations, SOURCE_EVENTS: self.watermark_delay_events}
        return parse_interval_ms(own[source]) if own[source] else self.watermark_delay_ms

    @property
    def input_limits(self) -> InputLimits:
        """The poison-record limits (``input.max.*``)."""
        return InputLimits(
            self.input_max_record_bytes, self.input_max_depth, self.input_max_keys, self.input_max_members
        )

    def input_delays_ms(self) -> dict[str, int]:
        """Each input's watermark delay (``input_delay_ms``), by source.

        >>> PurgatoryConfig(watermark_delay_events="30 seconds").input_delays_ms()
        {'operations': 10000, 'events': 30000}
        """
        return {source: self.input_delay_ms(source) for source in (SOURCE_OPERATIONS, SOURCE_EVENTS)}

    @property
    def watermark_idle_timeout_ms(self) -> int | None:
        """``watermark.idle.timeout`` in ms; None when unset (Spark's watermark alone).

        >>> PurgatoryConfig(watermark_idle_timeout="30 seconds").watermark_idle_timeout_ms
        30000
        """
        return parse_interval_ms(self.watermark_idle_timeout) if self.watermark_idle_timeout else None

    def __post_init__(self) -> None:
        self._check_types()
        for name, low in _LOWEST.items():
            if getattr(self, name) < low:
                raise ConfigError(f"{_KEYS_BY_FIELD[name]} must be >= {low}, got {getattr(self, name)}")
        for name in (f.name for f in fields(self) if f.name.startswith("watermark_")):  # intervals
            value = getattr(self, name)
            if value or name == "watermark_delay":
                try:
                    parse_interval_ms(value)
                except ConfigError as error:
                    raise ConfigError(f"{_KEYS_BY_FIELD[name]}: {error}") from None
        if self.deadline_clock not in ("event", "processing"):
            raise ConfigError(f"deadline.clock must be event or processing, got {self.deadline_clock!r}")
        if self.dedup_scope not in ("global", "shard"):
            raise ConfigError(f"purgatory.dedup.scope must be global or shard, got {self.dedup_scope!r}")
        if self.cross_shard_handoff not in ("replicas", "mailbox"):
            raise ConfigError(
                f"purgatory.cross.shard.handoff must be replicas or mailbox, got {self.cross_shard_handoff!r}"
            )
        if self.storage_s3_conditional_put not in ("etag", ""):
            raise ConfigError(
                "storage.s3.conditional.put must be etag or empty (a lock configured through "
                f"delta-rs's AWS_S3_LOCKING_PROVIDER), got {self.storage_s3_conditional_put!r}"
            )
        if self.input_max_depth > DEEPEST_MAX_DEPTH:  # deeper: the JSON readers' own limits first
            raise ConfigError(f"input.max.depth must be <= {DEEPEST_MAX_DEPTH}, got {self.input_max_depth}")
        self._check_output_kafka()
        if self.accumulator_buffer_memory < self.accumulator_batch_size:
            raise ConfigError(
                "accumulator.buffer.memory must be >= accumulator.batch.size "
                f"({self.accumulator_buffer_memory} < {self.accumulator_batch_size})"
            )

    @property
    def output_kafka_status_list(self) -> tuple[str, ...]:
        """``output.kafka.statuses`` as names (``expired,completed``: both).

        >>> PurgatoryConfig(output_kafka_statuses="expired, rejected").output_kafka_status_list
        ('expired', 'rejected')
        """
        return tuple(dict.fromkeys(s.strip() for s in self.output_kafka_statuses.split(",") if s.strip()))

    def _check_output_kafka(self) -> None:
        settings = dict(self.output_kafka_settings)
        if not self.output_kafka_topic:
            if settings:
                raise ConfigError(
                    f"output.kafka.{next(iter(settings))} is set but output.kafka.topic is not: "
                    "name the topic the outcomes go to"
                )
            return
        statuses = self.output_kafka_status_list
        unknown = [s for s in statuses if s not in OUTPUT_KAFKA_STATUSES]
        if unknown or not statuses:
            raise ConfigError(
                f"output.kafka.statuses must name some of {', '.join(OUTPUT_KAFKA_STATUSES)}, "
                f"got {self.output_kafka_statuses!r}"
            )
        if "bootstrap.servers" not in settings:
            raise ConfigError("output.kafka.topic is set but output.kafka.bootstrap.servers is not")
        truststore = settings.get("ssl.truststore.location")
        if truststore is not None and settings.get("ssl.truststore.type", "").upper() != "PEM":
            raise ConfigError(
                "output.kafka.ssl.truststore.location: the output topic's client (librdkafka) reads "
                "certificates as PEM: set output.kafka.ssl.truststore.type=PEM, or "
                "output.kafka.ssl.ca.location"
            )
        ours = sorted(set(settings) & {"transactional.id", "enable.idempotence"})
        if ours:
            raise ConfigError(
                f"output.kafka.{ours[0]} is the project's own (one transactional producer per "
                "checkpoint: docs/kafka-output.md)"
            )

    def _check_types(self) -> None:
        """Each field holds its type: ``PurgatoryConfig(shards="2")`` names the key and what to
        pass, instead of failing later with a bare ``TypeError`` (``from_mapping`` takes text)."""
        for f in fields(self):
            value, key = getattr(self, f.name), _KEYS_BY_FIELD[f.name]
            wanted = _TYPES[f.type]
            if isinstance(value, wanted) and (f.type == "bool" or not isinstance(value, (bool, np.bool_))):
                continue
            hint = f"e.g. {f.name}={f.default!r}, or from_mapping({{{key!r}: {str(value)!r}}}) for text"
            raise ConfigError(
                f"{key} ({f.name}) must be {_WORDS[f.type]}, got {value!r} ({type(value).__name__}): {hint}"
            )

    @classmethod
    def keys(cls) -> list[str]:
        """The dotted keys this config accepts."""
        return list(_FIELDS_BY_KEY)

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, object], *, also_allowed: Iterable[str] = ()
    ) -> PurgatoryConfig:
        """Build from dotted keys (strings or typed values); unknown keys are an error.

        ``also_allowed``: the caller's own keys (the job's ``job.*``, ``kafka.*``), named in
        the error of an unknown key with this config's, so that its list is complete.
        """
        kwargs: dict[str, object] = {}
        producer: dict[str, str] = {}
        for key, raw in values.items():
            name = _FIELDS_BY_KEY.get(key)
            if name is None and key.startswith(_OUTPUT_KAFKA) and len(key) > len(_OUTPUT_KAFKA):
                producer[key[len(_OUTPUT_KAFKA) :]] = str(raw).strip()
                continue
            if name is None:
                allowed = [*cls.keys(), *also_allowed]
                close = difflib.get_close_matches(key, allowed, n=1)
                guess = f" (did you mean {close[0]}?)" if close else ""
                raise ConfigError(f"unknown configuration key {key!r}{guess}; allowed: {', '.join(allowed)}")
            kwargs[name] = _coerce(key, name, raw)
        if producer:
            kwargs["output_kafka_settings"] = tuple(sorted(producer.items()))
        return cls(**kwargs)


#: each dotted key (docs/configuration.md says what it does) -> its field
_FIELDS_BY_KEY = {
    "purgatory.tick.ms": "tick_ms",
    "purgatory.wheel.size": "wheel_size",
    "purgatory.shards": "shards",
    "purgatory.max.timeout.ms": "max_timeout_ms",
    "purgatory.progress.retention.ms": "progress_retention_ms",
    "purgatory.dedup.retention.ms": "dedup_retention_ms",
    "purgatory.dedup.scope": "dedup_scope",
    "watermark.delay": "watermark_delay",
    "watermark.delay.operations": "watermark_delay_operations",
    "watermark.delay.events": "watermark_delay_events",
    "watermark.idle.timeout": "watermark_idle_timeout",
    "deadline.clock": "deadline_clock",
    "accumulator.batch.size": "accumulator_batch_size",
    "accumulator.linger.ms": "accumulator_linger_ms",
    "accumulator.buffer.memory": "accumulator_buffer_memory",
    "accumulator.staging.path": "accumulator_staging_path",
    "source.max.files.per.trigger": "source_max_files_per_trigger",
    "purgatory.cross.shard.operations": "cross_shard_operations",
    "purgatory.shard.key.delimiter": "shard_key_delimiter",
    "purgatory.cross.shard.handoff": "cross_shard_handoff",
    "purgatory.max.future.ms": "max_future_ms",
    "purgatory.state.path": "state_path",
    "purgatory.state.segment.rows": "state_segment_rows",
    "purgatory.state.retain.versions": "state_retain_versions",
    "storage.endpoint": "storage_endpoint",
    "storage.region": "storage_region",
    "storage.allow.http": "storage_allow_http",
    "storage.s3.conditional.put": "storage_s3_conditional_put",
    "storage.retries": "storage_retries",
    "query.stop.timeout.ms": "stop_timeout_ms",
    "output.take.over": "output_take_over",
    "input.max.record.bytes": "input_max_record_bytes",
    "input.max.depth": "input_max_depth",
    "input.max.keys": "input_max_keys",
    "input.max.members": "input_max_members",
    "output.kafka.topic": "output_kafka_topic",
    "output.kafka.statuses": "output_kafka_statuses",
    "output.kafka.*": "output_kafka_settings",
}
_OUTPUT_KAFKA = "output.kafka."
#: what ``output.kafka.statuses`` may name: the outcomes' statuses, the rejected rows, the warnings
OUTPUT_KAFKA_STATUSES = (EXPIRED, COMPLETED, CANCELLED, KIND_REJECTED, KIND_WARNING)
_KEYS_BY_FIELD = {name: key for key, name in _FIELDS_BY_KEY.items()}
#: the smallest value of each number field
_LOWEST = {
    "tick_ms": 1,
    "wheel_size": 2,
    "shards": 1,
    "accumulator_batch_size": 1,
    "accumulator_buffer_memory": 1,
    "source_max_files_per_trigger": 1,
    "state_segment_rows": 1,
    "state_retain_versions": 1,
    "max_timeout_ms": 0,
    "progress_retention_ms": 0,
    "dedup_retention_ms": 0,
    "accumulator_linger_ms": 0,
    "max_future_ms": 0,
    "stop_timeout_ms": 0,
    "input_max_record_bytes": 64,
    "input_max_depth": 2,
    "input_max_keys": 1,
    "input_max_members": 1,
}
#: a field's annotation (text: ``from __future__ import annotations``) -> its type, in words
_TYPES = {"int": numbers.Integral, "str": str, "bool": (bool, np.bool_), "tuple": tuple}
_WORDS = {"int": "an integer", "str": "text", "bool": "true or false (a bool)", "tuple": "(key, value) pairs"}
assert set(_KEYS_BY_FIELD) == {f.name for f in fields(PurgatoryConfig)}


_FIELD_TYPES = {f.name: f.type for f in fields(PurgatoryConfig)}


def _coerce(key: str, name: str, raw: object) -> object:
    if _FIELD_TYPES[name] == "str":
        return str(raw).strip()
    if _FIELD_TYPES[name] == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise ConfigError(f"{key} must be true or false, got {raw!r}")
        return text == "true"
    if isinstance(raw, bool):
        raise ConfigError(f"{key} must be an integer >= {_LOWEST.get(name, 0)}, got {raw!r}")
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip().replace("_", ""))
    except ValueError:
        raise ConfigError(f"{key} must be an integer >= {_LOWEST.get(name, 0)}, got {raw!r}") from None


def read_properties(path: str) -> dict[str, str]:
    """Read a Kafka-style ``.properties`` file: ``key = value`` lines, ``#`` comments.

    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp(), "x.conf")
    >>> _ = p.write_text("# local\\npurgatory.shards = 2\\nwatermark.delay=5 seconds\\n")
    >>> read_properties(str(p))
    {'purgatory.shards': '2', 'watermark.delay': '5 seconds'}
    """
    values: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith(("#", "!")):
                continue
            key, sep, value = text.partition("=")
            if not sep:
                raise ConfigError(f"{path}:{number}: expected 'key = value', got {text!r}")
            values[key.strip()] = value.strip()
    return values


def read_settings(conf_files: list[str], overrides: list[str]) -> dict[str, str]:
    """The ``--conf FILE`` files in order, then the ``--set KEY=VALUE`` overrides (the last one
    wins).

    Raises:
        ConfigError: a file that does not exist, or an override that is not KEY=VALUE.
    """
    values: dict[str, str] = {}
    for path in conf_files:
        if not os.path.exists(path):
            raise ConfigError(f"--conf {path}: no such file")
        values.update(read_properties(path))
    for pair in overrides:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        values[key.strip()] = value.strip()
    return values


# -- secrets ------------------------------------------------------------------------------------------

#: keys whose values are credentials: never printed, logged or written
SECRET_KEY = re.compile(r"secret|passw|jaas|token|credential|account\.key|\bsas\b|private", re.IGNORECASE)
_QUOTED_PASSWORD = re.compile(r'(password\s*=\s*)"[^"]*"', re.IGNORECASE)
_HIDDEN = "****"


def secret_values(values: Mapping[str, str]) -> tuple[str, ...]:
    """The values of ``values``' credential keys (``SECRET_KEY``), and the passwords quoted in
    a JAAS value, longest first: what ``scrubbed`` hides.

    >>> secret_values({"kafka.sasl.jaas.config": 'x required password="pw-1";', "job.master": "local"})
    ('x required password="pw-1";', 'pw-1')
    """
    found = {str(v) for k, v in values.items() if SECRET_KEY.search(k) and str(v).strip()}
    found |= {m.group(0).split('"')[1] for v in list(found) for m in _QUOTED_PASSWORD.finditer(v)}
    return tuple(sorted((v for v in found if v), key=len, reverse=True))


def scrubbed(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value, and any quoted ``password="..."``, replaced by ``****``.

    >>> scrubbed('failed: password="pw-1" for pw-1', ("pw-1",))
    'failed: password="****" for ****'
    """
    for secret in secrets:
        text = text.replace(secret, _HIDDEN)
    return _QUOTED_PASSWORD.sub(lambda m: f'{m.group(1)}"{_HIDDEN}"', text)


class SecretFilter(logging.Filter):
    """Hides ``secrets`` in every record of the loggers it is added to (``scrubbed``)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = tuple(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrubbed(message, self.secrets)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text, record.exc_info = scrubbed(text, self.secrets), None
        return True
