"""What the driver keeps per Py4J gateway client: JVM lookups made once, not per plan.

Every name resolved through ``spark._jvm`` is a round trip per dotted part.  What a JVM
answers once stays true for it, so it is kept under the client that asked (the client
itself compared: an old client's id may be reused).

Invariant: a value is only ever served to the client it was made with.
"""

from __future__ import annotations

from typing import Any

_KEPT: dict[tuple[str, int], tuple[Any, dict[Any, Any]]] = {}


def kept(jvm: Any, kind: str) -> dict[Any, Any]:
    """The dict of ``kind`` (a caller's name for what it keeps) for ``jvm``'s gateway client."""
    client = jvm._gateway_client
    held = _KEPT.get((kind, id(client)))
    if held is None or held[0] is not client:
        held = _KEPT[(kind, id(client))] = (client, {})
    return held[1]
