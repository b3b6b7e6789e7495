"""Shard labels: group-key values that Spark's hash partitioner sends to distinct partitions.

Spark places a group in partition ``pmod(hash(key), spark.sql.shuffle.partitions)``; with the
shard numbers as keys, several shards share a partition (and a task).  ``shard_labels`` picks
for each shard a label whose hash lands in a least-loaded partition.

Invariant: the labels depend only on the number of groups and partitions, so they are the
same on every restart from a checkpoint (the state under a label stays that shard's).
"""

from __future__ import annotations


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` (Murmur3_x86_32) of an int, as its hash partitioner computes it.

    >>> [spark_hash_int(v) for v in (0, 1, 2, 3)]
    [933211791, -559580957, 1765031574, -1823081949]
    """
    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = _rotl(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = seed ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def shard_labels(groups: int, partitions: int | None = None) -> list[int]:
    """Group-key values, one per shard group, that Spark's hash partitioning sends to distinct
    partitions (when ``groups <= partitions``); ``partitions`` defaults to ``groups``, as the
    job sets ``spark.sql.shuffle.partitions``.

    >>> shard_labels(3, 4), shard_labels(8, 9)
    ([0, 2, 6], [0, 1, 2, 6, 8, 11, 15, 20])
    """
    partitions = partitions or groups
    labels: list[int] = []
    load = [0] * partitions
    candidate = 0
    while len(labels) < groups:
        part = spark_hash_int(candidate) % partitions
        if load[part] == min(load):  # a least-loaded partition: take it
            labels.append(candidate)
            load[part] += 1
        candidate += 1
    return labels


def shard_numbers(groups: int) -> dict[int, int]:
    """Group label -> shard number, for ``groups`` groups (numbered in label order).

    >>> shard_numbers(3)
    {0: 0, 1: 1, 11: 2}
    """
    return {label: number for number, label in enumerate(shard_labels(groups))}
