"""The Spark host: routes rows into the engine and its output back out; it decides nothing.

A row is read (``formats``, ``sources``, ``typed_columns``), routed to its shard
(``routing``, the design explained there), handed to the shard step once per shard per
micro-batch (``operator``, ``batch``) and split into the contract's tables (``output``).

Invariant: every column and name comes from ``spark_purgatory.contract``; the engine sees
only validated pandas frames.
"""
