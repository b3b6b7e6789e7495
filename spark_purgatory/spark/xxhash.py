"""xxHash in Python: XXH64, as Spark's ``xxhash64`` computes it, and XXH32, lz4-java's checksum.

``rescale`` reproduces both without a JVM: a Python loop over words, for keys and small
blocks, never for rows.

Invariant: standard XXH64 and XXH32 (the reference test vectors below).

>>> hex(xxh64(b"", 0)), hex(xxh64(b"abc", 0))
('0xef46db3751d8e999', '0x44bc2cf5ad770999')
>>> hex(xxh32(b"", 0)), hex(xxh32(b"abc", 0))
('0x2cc5d05', '0x32d153ff')
"""

from __future__ import annotations

import struct
from collections.abc import Callable

_M64, _M32 = (1 << 64) - 1, 0xFFFFFFFF
_Q1, _Q2, _Q3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_Q4, _Q5 = 9650029242287828579, 2870177450012600261
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _round64(acc: int, lane: int) -> int:
    return _rotl64((acc + lane * _Q2) & _M64, 31) * _Q1 & _M64


def _round32(acc: int, lane: int) -> int:
    return _rotl32((acc + lane * _P2) & _M32, 13) * _P1 & _M32


def _merge64(acc: int, v: int) -> int:
    return ((acc ^ _round64(0, v)) * _Q1 + _Q4) & _M64


def _stripes(
    words: tuple[int, ...],
    seed: int,
    primes: tuple[int, int],
    lane: Callable[[int, int], int],
    rotl: Callable[[int, int], int],
    mask: int,
) -> tuple[int, tuple[int, int, int, int]]:
    """The four lanes over whole stripes of ``words`` (four words a stripe), and their
    convergence; returns the converged accumulator and the lanes."""
    p1, p2 = primes
    v1, v2, v3, v4 = (seed + p1 + p2) & mask, (seed + p2) & mask, seed & mask, (seed - p1) & mask
    for i in range(0, len(words), 4):
        v1, v2 = lane(v1, words[i]), lane(v2, words[i + 1])
        v3, v4 = lane(v3, words[i + 2]), lane(v4, words[i + 3])
    h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) & mask
    return h, (v1, v2, v3, v4)


def _avalanche(h: int, shifts: tuple[int, int, int], primes: tuple[int, int], mask: int) -> int:
    """The final mix: every input bit reaches every output bit."""
    h ^= h >> shifts[0]
    h = h * primes[0] & mask
    h ^= h >> shifts[1]
    h = h * primes[1] & mask
    return h ^ (h >> shifts[2])


def xxh64(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` (unsigned)."""
    n, at = len(data), 0
    if n >= 32:
        words = struct.unpack_from(f"<{(n // 32) * 4}Q", data)
        h, lanes = _stripes(words, seed, (_Q1, _Q2), _round64, _rotl64, _M64)
        for v in lanes:
            h = _merge64(h, v)
        at = (n // 32) * 32
    else:
        h = (seed + _Q5) & _M64
    h = (h + n) & _M64
    while at + 8 <= n:
        (word,) = struct.unpack_from("<Q", data, at)
        h = (_rotl64(h ^ _round64(0, word), 27) * _Q1 + _Q4) & _M64
        at += 8
    if at + 4 <= n:
        (word,) = struct.unpack_from("<I", data, at)
        h = (_rotl64(h ^ (word * _Q1 & _M64), 23) * _Q2 + _Q3) & _M64
        at += 4
    while at < n:
        h = _rotl64(h ^ (data[at] * _Q5 & _M64), 11) * _Q1 & _M64
        at += 1
    return _avalanche(h, (33, 29, 32), (_Q2, _Q3), _M64)


def xxh32(data: bytes, seed: int) -> int:
    """XXH32 of ``data``."""
    n, at = len(data), 0
    if n >= 16:
        words = struct.unpack_from(f"<{(n // 16) * 4}I", data)
        h, _ = _stripes(words, seed, (_P1, _P2), _round32, _rotl32, _M32)
        at = (n // 16) * 16
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while at + 4 <= n:
        (word,) = struct.unpack_from("<I", data, at)
        h = _rotl32((h + word * _P3) & _M32, 17) * _P4 & _M32
        at += 4
    while at < n:
        h = _rotl32((h + data[at] * _P5) & _M32, 11) * _P1 & _M32
        at += 1
    return _avalanche(h, (15, 13, 16), (_P2, _P3), _M32)
