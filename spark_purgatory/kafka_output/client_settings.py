"""The output topic's clients' settings in librdkafka's names: what the producer, the marker's
consumer and the topic's health check are given from the ``output.kafka.<key>`` keys.

The keys may be the Java clients' (the inputs' ``kafka.*`` security keys, as users write them):
``librdkafka_settings`` translates those; ``connection_settings`` is where and how to connect,
what every client of the topic shares.
"""

from __future__ import annotations

import re

#: every client connects at once, to every broker the metadata names (librdkafka looks for a
#: coordinator at once, and again only on a timer); the user's settings override both
EAGER = {"enable.sparse.connections": "false", "reconnect.backoff.ms": "10"}
#: the settings a consumer (the marker's reader) shares with the producer: where and how to connect
CONNECTION = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.",
    "ssl.",
    "client.",
    "socket.",
    "broker.",
    "reconnect.",
    "enable.sparse.connections",
)
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
    """Where and how to connect, of the producer's settings: what every client of the topic shares."""
    own = {k: v for k, v in librdkafka_settings(settings).items() if k.startswith(CONNECTION)}
    return {**EAGER, **own}
