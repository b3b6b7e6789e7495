"""The Delta output: the operator's rows, batched Kafka-producer style, committed exactly once.

The executors stage their rows (``staging``), the driver keeps the bookkeeping and decides
what is ready (``accumulator``), a small Spark job writes the data files (``sender``) and
the driver commits them (``writers``); ``sink`` is a micro-batch's way through.

Invariants: no output row passes through the driver; nothing staged is lost and nothing is
committed twice, across crashes and replays; the tables' columns are ``contract.TABLES``'.
This package knows the operator only through ``contract.OPERATOR_OUTPUT``.
"""
