"""The tests' fault-injecting proxy in front of the S3 store: ``testbed.services.FaultyProxy``
(what it answers and how it is told: that module's docstring; the soak injects the same faults).
"""

from __future__ import annotations

from testbed.services import FaultyProxy, client_of

__all__ = ["FaultyProxy", "client_of"]
