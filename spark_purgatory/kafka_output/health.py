"""Is the output topic there, and does the broker take this job's login?  One line when not.

A deleted topic or a revoked login is said in one line naming the topic or the user; a
broker that does not answer is never called gone (that may pass).  A refused login never
answers the metadata request (librdkafka retries it), so the check asks in growing steps
and looks at the errors the client met after each.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from .client_settings import connection_settings, librdkafka_settings

#: the admin client's own lines (librdkafka's), as records
log = logging.getLogger(__name__)

#: librdkafka's words for a login or a right the broker refused (SASL, ACLs)
_REFUSED = re.compile(r"Authentication failed|SASL authentication error|AUTHORIZATION|not authorized", re.I)
#: the check's first wait for the metadata before it looks at the client's errors; each wait
#: after it twice as long, up to ``_MAX_STEP_S``
_STEP_S = 0.25
_MAX_STEP_S = 4.0


class TopicGone(RuntimeError):
    """The output topic cannot be written: deleted, or the login refused (its line)."""


def topic_fault(topic: str, settings: dict[str, str], *, timeout_s: float = 10.0) -> str | None:
    """One line when the brokers of ``settings`` (librdkafka's names) have no ``topic`` or
    refuse the login; None when it is there, or when they do not answer."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient({**connection_settings(settings), "error_cb": errors.append, "logger": log})
    servers = settings.get("bootstrap.servers")
    deadline, metadata, ended, step = time.monotonic() + timeout_s, None, False, _STEP_S
    while True:
        try:
            wait, step = max(0.0, min(step, deadline - time.monotonic())), min(2 * step, _MAX_STEP_S)
            metadata = admin.list_topics(topic, timeout=wait)
        except KafkaException as error:  # no answer within the step (no broker connected: _TRANSPORT)
            ended = error.args[0].code() not in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
            if ended:  # another error of the call's own: as one call would, no metadata
                errors.append(error.args[0])
        admin.poll(0)  # the errors the client met on the way (a refused login) reach error_cb here
        refused = [e for e in errors if _REFUSED.search(str(e)) or e.code() == KafkaError._AUTHENTICATION]
        if metadata is not None or refused or ended or time.monotonic() >= deadline:
            break
    if refused:
        return f"Kafka at {servers} refuses the output topic's login{_as_whom(settings)}: {refused[0].str()}"
    if metadata is None:
        return None  # no answer: may pass
    found = metadata.topics.get(topic)
    if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        return f"the output topic {topic!r} is gone from {servers} (deleted, or never created)"
    if found.error is not None and _REFUSED.search(str(found.error)):
        return (
            f"Kafka at {servers} refuses the output topic {topic!r} to this job's login: {found.error.str()}"
        )
    return None


def _as_whom(settings: dict[str, str]) -> str:
    """`` as 'user' (MECHANISM)``: which credential to renew (the password is never said)."""
    user = librdkafka_settings(settings).get("sasl.username")  # sasl.jaas.config's too
    if user is None:
        return ""
    mechanism = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms") or "PLAIN"
    return f" as {user!r} ({mechanism})"
