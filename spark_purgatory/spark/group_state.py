"""How a shard's state value travels through Spark's group state: as text, or (old
checkpoints) as bytes.

With ``purgatory.state.path`` (what ``start`` sets) the value is a *pointer*, ``@`` and the
name of the shard's delta file (``state.increments``), kept as that text: a hundred bytes
whatever the shard holds.  A whole value (no state path, or a checkpoint written before the
pointers, which loads as it is and gets a pointer at its next save) travels as below.

``applyInPandasWithState`` hands each group's state to Python pickled by Pyrolite, once per
Arrow chunk of the group's rows.  Pyrolite pickles a ``byte[]`` as a ``bytearray`` built from
a Latin-1 string it assembles one byte at a time (``Pickler.put_arrayOfPrimitives``), and
half as many bytes again on the wire.  A string it pickles as UTF-8 in one copy.  So the
value (``state.save_state``: Arrow IPC, LZ4 parts) is stored as its base64 text: a third
larger, but through Spark and back with no per-byte step (docs/performance-history.md, "Side by
side with Spark's alternatives").

A checkpoint keeps the state schema it was started with (Spark checks it at every restart,
and binary and string are not compatible), so a query started before the text value
(spark-purgatory 0.1.0 wrote binary) keeps its binary value: ``encoding_of`` reads the
schema the checkpoint recorded, and ``query.start`` passes it on.  Both load the same way
(``shard_bytes``), and ``inspect`` reads either.

**The adapter.**  A shard call meets Spark's ``GroupState`` in two places, both here:
``call_group`` reads the value the group stored and Spark's two clocks into one
``ShardStep`` call, ``keep_group`` writes what the step decided back (its value and timeout,
or the state removed).  The operator runs them on Spark's ``GroupState``, the tester
(``testing.local_shards``) on its in-process one.

Invariant: ``shard_bytes(to_group_state(v, encoding)) == v`` for either encoding.
"""

from __future__ import annotations

import binascii
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import types as T

from ..checkpoint_paths import OpenCheckpoint, open_checkpoint
from ..state.increments import is_pointer
from ..storage import Storage, read_bytes

if TYPE_CHECKING:
    import pandas as pd

    from ..shard.step import ShardResult, ShardStep

__all__ = ["StateEncoding", "STATE_ENCODINGS", "call_group", "encoding_of", "keep_group", "shard_bytes"]
__all__ += ["state_schema", "to_group_state"]

#: how the value is stored in the group state: ``text`` (base64, new checkpoints) or ``binary``
StateEncoding = Literal["text", "binary"]
STATE_ENCODINGS: tuple[str, ...] = ("text", "binary")
_FIELD = "shard_state"


def state_schema(encoding: StateEncoding) -> T.StructType:
    """The group state's schema for ``encoding``: one field, ``shard_state``."""
    kind = T.StringType() if _checked(encoding) == "text" else T.BinaryType()
    return T.StructType([T.StructField(_FIELD, kind)])


def to_group_state(value: bytes, encoding: StateEncoding) -> bytes | str:
    """``value`` as the group state's field holds it (a pointer as its own text)."""
    if _checked(encoding) == "binary":
        return value
    if is_pointer(value) and value.isascii():
        return value.decode("ascii")
    return binascii.b2a_base64(value, newline=False).decode("ascii")


def shard_bytes(stored: Any) -> bytes:
    """The value back from the group state's field, whichever encoding stored it.

    >>> shard_bytes(to_group_state(b"\\x00\\xff shard", "text")), shard_bytes(bytearray(b"ab"))
    (b'\\x00\\xff shard', b'ab')
    >>> shard_bytes(to_group_state(b"@deltas/shard-1/v.l.t.arrow", "text"))
    b'@deltas/shard-1/v.l.t.arrow'
    """
    if isinstance(stored, str) and stored.startswith("@"):  # a pointer (state.increments)
        return stored.encode("ascii")
    if isinstance(stored, str):
        return binascii.a2b_base64(stored)
    return bytes(stored)


def call_group(step: ShardStep, shard: int, rows: pd.DataFrame, state: Any) -> ShardResult:
    """One ``ShardStep`` call for the group whose ``GroupState`` is ``state``: the value it
    stored (none: a new shard), Spark's watermark and the micro-batch's time."""
    return step(
        shard,
        rows,
        shard_bytes(state.get[0]) if state.exists else None,
        watermark_ms=int(state.getCurrentWatermarkMs()),
        batch_time_ms=int(state.getCurrentProcessingTimeMs()),  # the micro-batch's time
    )


def keep_group(state: Any, done: ShardResult, encoding: StateEncoding) -> bool:
    """What the step decided (``shard.step.decide``) into the group's ``GroupState``: its value
    and event-time timeout, or the state removed (then False)."""
    if done.value is None:
        state.remove()
        return False
    state.update((to_group_state(done.value, encoding),))
    if done.timeout_ms is not None:
        state.setTimeoutTimestamp(done.timeout_ms)
    return True


def encoding_of(checkpoint: str | OpenCheckpoint, *, storage: Storage | None = None) -> StateEncoding:
    """The encoding a query on ``checkpoint`` must keep: ``binary`` where Spark recorded a
    binary ``shard_state`` (a checkpoint started before the text value), else ``text`` (a new
    checkpoint, or one started with text)."""
    chk = open_checkpoint(checkpoint, storage)
    try:
        recorded = read_bytes(chk.fs, chk.files.state_schema)
    except (FileNotFoundError, NotADirectoryError):  # Spark has not run on it: a new checkpoint
        return "text"
    # the file holds the key and value schemas as JSON: the field's type follows its name
    return "binary" if b'"name":"shard_state","type":"binary"' in recorded else "text"


def _checked(encoding: str) -> str:
    if encoding not in STATE_ENCODINGS:
        raise ValueError(f"state encoding must be one of {', '.join(STATE_ENCODINGS)}, got {encoding!r}")
    return encoding
