"""How a shard's state value travels through Spark's group state: as text, or (old
checkpoints) as bytes.

With ``purgatory.state.path`` the value is a *pointer* to the shard's delta file, kept as
text; a whole value is stored as base64 text (Pyrolite pickles a ``byte[]`` one byte at a
time).  A checkpoint started by 0.1.0 keeps its binary value (``encoding_of``); both load the
same way (``shard_bytes``).  ``call_group`` and ``keep_group`` are the only places a shard
call meets a ``GroupState``.

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
    """What the step decided into the group's ``GroupState``: its value and event-time
    timeout, or the state removed (then False)."""
    if done.value is None:
        state.remove()
        return False
    state.update((to_group_state(done.value, encoding),))
    if done.timeout_ms is not None:
        state.setTimeoutTimestamp(done.timeout_ms)
    return True


def encoding_of(checkpoint: str | OpenCheckpoint, *, storage: Storage | None = None) -> StateEncoding:
    """The encoding a query on ``checkpoint`` must keep: ``binary`` where Spark recorded a
    binary ``shard_state``, else ``text``."""
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
