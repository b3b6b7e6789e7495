"""What the driver keeps per Py4J gateway client: JVM lookups made once, not per plan.

Every name a plan-building step resolves through ``spark._jvm`` (a class, a literal, whether
a class loads) is a round trip to the JVM per dotted part, and ``start`` builds several
projections that ask the same things.  What a JVM answers once stays true for that JVM, so
it is kept here, under the client that asked: a new session's JVM is a new client and asks
again (an old client's id may be reused by a new one: the client itself is compared).

Invariant: a value is only ever served to the client it was made with.
"""

from __future__ import annotations

from typing import Any

__all__ = ["kept"]

_KEPT: dict[tuple[str, int], tuple[Any, dict[Any, Any]]] = {}


def kept(jvm: Any, kind: str) -> dict[Any, Any]:
    """The dict of ``kind`` (a caller's name for what it keeps) for ``jvm``'s gateway client."""
    client = jvm._gateway_client
    held = _KEPT.get((kind, id(client)))
    if held is None or held[0] is not client:
        held = _KEPT[(kind, id(client))] = (client, {})
    return held[1]
