"""Storage for the big tables' arrays: large ones in their own anonymous memory mappings.

A big array from ``malloc`` may land in the heap, where its pages stay resident once freed.
``empty`` gives one of at least ``MAPPED_BYTES`` its own anonymous mapping: pages never
written cost nothing, and the whole mapping goes back to the system with the array.
``release`` hands the allocators' free memory back after a call that did bulk work (``due``).

Invariant: an array from ``empty`` behaves as ``np.empty``'s (writable, C-contiguous); it
owns its mapping through ``base``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import weakref
from collections.abc import Callable

import numpy as np
import pyarrow as pa

#: arrays of at least this many bytes get their own mapping (a new mapping's pages fault on
#: first write: smaller arrays, remade often, stay in the heap)
MAPPED_BYTES = 4 * 1024 * 1024
#: ``due`` once this many bytes were mapped since the last release, or a call took this many rows
RELEASE_BYTES = 32 * 1024 * 1024
RELEASE_ROWS = 32_768

_mapped = 0  # bytes mapped since the last ``release``
_bulk = 0  # rows of bulk work inside calls since the last ``release`` (``bulk``)
_live = 0  # bytes in mappings not yet unmapped


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def empty(n: int, dtype: np.dtype | str) -> np.ndarray:
    """An uninitialised array; one of ``MAPPED_BYTES`` or more in its own anonymous mapping."""
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if nbytes < MAPPED_BYTES or dtype.hasobject:
        return np.empty(n, dtype)
    global _mapped, _live
    _mapped += nbytes
    _live += nbytes
    mapping = mmap.mmap(-1, nbytes)
    weakref.finalize(mapping, _unmapped, nbytes)
    return np.frombuffer(mapping, dtype=dtype, count=n)


def _unmapped(nbytes: int) -> None:
    global _live
    _live -= nbytes


def mapped_bytes() -> int:
    """Bytes in the mappings of arrays alive now (pages never written included)."""
    return _live


def copy_of(values: np.ndarray) -> np.ndarray:
    out = empty(values.size, values.dtype)
    out[...] = values
    return out


def bulk(rows: int) -> None:
    """A step of a call worked on ``rows`` rows of a table at once (counts towards ``due``)."""
    global _bulk
    _bulk += rows


def due(rows: int) -> bool:
    """Whether a call that took ``rows`` rows should ``release``."""
    return rows + _bulk >= RELEASE_ROWS or _mapped >= RELEASE_BYTES


def release() -> None:
    """Hand the allocators' free memory back to the operating system."""
    global _mapped, _bulk
    _mapped = _bulk = 0
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)
