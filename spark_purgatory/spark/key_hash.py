"""Routing's hash, in Python: the shard Spark's ``pmod(xxhash64(shard key), shards)`` gives a key.

``rescale`` and the tester must send a key where routing sends it, without a JVM: XXH64 of
the UTF-8 bytes, seed 42, as a signed long, then Spark's ``pmod``.

Invariant: ``shards_of(keys, n, d)[i] == pmod(xxhash64(shard key of keys[i]), n)`` in Spark.
"""

from __future__ import annotations

import numpy as np

from .xxhash import xxh64

_SPARK_SEED = 42


def spark_xxhash64(value: str, seed: int = _SPARK_SEED) -> int:
    """Spark's ``xxhash64(value)`` of a string (signed, as Spark returns it).

    >>> spark_xxhash64("")
    -7444071767201028348
    """
    h = xxh64(value.encode("utf-8"), _unsigned(seed))
    return h - (1 << 64) if h >= 1 << 63 else h


def shards_of(keys: np.ndarray, shards: int, delimiter: str = "") -> np.ndarray:
    """The shard of each key as routing computes it (``delimiter``:
    ``purgatory.shard.key.delimiter``; the shard key is the part before its first occurrence).

    >>> shards_of(np.array(["a", "a:x", "b"], dtype=object), 4, ":").tolist()
    [0, 0, 3]
    """
    memo: dict[str, int] = {}
    out = np.empty(len(keys), dtype=np.int64)
    for i, key in enumerate(keys):
        shard_key = key.split(delimiter, 1)[0] if delimiter else key
        found = memo.get(shard_key)
        if found is None:
            found = memo[shard_key] = spark_xxhash64(shard_key) % shards  # Python's % is pmod
        out[i] = found
    return out


def registry_of(op_id: str, shards: int) -> int:
    """The op_id's registry shard (``engine.registry``) as routing computes it:
    ``pmod(xxhash64(op_id, 'registry'), shards)``; Spark hashes each argument with the hash
    of the ones before as its seed.

    >>> registry_of("o2", 2) in (0, 1)
    True
    """
    return spark_xxhash64("registry", spark_xxhash64(op_id)) % shards


def text_shard(text: str | None, shards: int) -> int:
    """The shard of a row rejected at parse: ``pmod(xxhash64(raw), shards)`` (a null hashes
    to the seed)."""
    return (_SPARK_SEED if text is None else spark_xxhash64(text)) % shards


def _unsigned(value: int) -> int:
    """A signed long (Spark's seed) as the unsigned 64 bits the XXH64 function takes."""
    return value + (1 << 64) if value < 0 else value
