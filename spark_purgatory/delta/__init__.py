"""The Delta output: the operator's rows, batched Kafka-producer style, committed exactly once.

Invariants: no output row passes through the driver; nothing staged is lost and nothing is
committed twice, across crashes and replays; the tables' columns are ``contract.TABLES``'.
"""
