"""A micro-batch's few rows to the driver's sink through a sink of Spark's own kind.

Through ``foreachBatch`` the few rows the driver's sink needs (one per staged file and per
shard call) cost a second analysis and plan of the micro-batch.  The sink JAR's
``StagedRowsSink`` is written as Spark's ``noop`` is: each task's rows travel in its commit
message, and the driver's commit hands them as JSON to a ``BatchCommitter`` here (Py4J),
before Spark records the micro-batch as done; a committer that raises fails it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .settings import is_connect
from .small_rows import carried, jvm_class, table_of

log = logging.getLogger(__name__)

#: the JVM sink (a ``TableProvider``: its class name is the ``writeStream`` format)
STAGED_ROWS_SINK = "io.sparkpurgatory.sink.StagedRowsSink"
#: the version of its calls this module makes (``StagedRowsSink.VERSION``)
VERSION = 2


class _Committer:
    """``BatchCommitter`` in Python: ``begin`` and ``abort`` passed on; a micro-batch's JSON
    columns as an Arrow table of ``schema`` (the frame's columns put in the schema's order),
    given to ``take``."""

    def __init__(
        self,
        schema: pa.Schema,
        names: list[str],
        begin: Callable[[], None],
        take: Callable[[pa.Table, int], None],
        abort: Callable[[int], None],
    ) -> None:
        self._schema = schema
        self._written = pa.schema([schema.field(name) for name in names])  # the frame's order
        self._begin = begin
        self._take = take
        self._abort = abort

    def begin(self) -> None:
        self._begin()

    def abort(self, batch_id: int) -> None:
        self._abort(int(batch_id))

    def commit(self, batch_id: int, text: str) -> None:
        rows = table_of(text, self._written, "StagedRowsSink").select(self._schema.names)
        self._take(rows.cast(self._schema), int(batch_id))

    class Java:
        implements = ["io.sparkpurgatory.sink.BatchCommitter"]


@dataclass
class StagedRowsWriter:
    """``frame``'s ``writeStream`` into ``StagedRowsSink`` (``stream()``, a new one for each
    run of the query) and its committer's ``key`` in the driver."""

    frame: Any
    key: str
    sink_class: Any

    def stream(self) -> Any:
        """A new ``DataStreamWriter`` of ``frame`` into the sink, its committer named."""
        return self.frame.writeStream.format(STAGED_ROWS_SINK).option("committer", self.key)

    def forget(self) -> None:
        """Drop the driver's reference to the committer (its query is over)."""
        try:
            self.sink_class.unregister(self.key)
        except Exception as exc:  # noqa: BLE001 - a stopped JVM holds nothing any more
            log.debug("StagedRowsSink: committer %s not forgotten (%s)", self.key, exc)


def _nothing(*_args: Any) -> None:
    return None


def staged_rows_writer(
    frame: Any,
    schema: pa.Schema,
    *,
    take: Callable[[pa.Table, int], None],
    begin: Callable[[], None] = _nothing,
    abort: Callable[[int], None] = _nothing,
) -> StagedRowsWriter | None:
    """``frame``'s writer into ``StagedRowsSink``: ``begin()`` as each micro-batch's write
    begins (a stopping query refuses it there), then ``take(rows, batch_id)`` with its rows
    (an Arrow table of ``schema``) or ``abort(batch_id)``; None where the sink cannot be used
    here (Spark Connect, a driver without the JAR or with one of another version, a column
    type the text does not carry).  Registers the committer in the driver: ``forget()`` it
    once the query is over."""
    spark = frame.sparkSession
    names = list(frame.columns)
    if is_connect(spark) or sorted(names) != sorted(schema.names):
        return None
    if not all(carried(field.type) for field in schema):
        return None
    sink_class = jvm_class(spark, STAGED_ROWS_SINK, VERSION)
    if sink_class is None:
        return None
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)  # as foreachBatch does: the JVM calls the committer
    key = f"purgatory-{uuid.uuid4().hex}"
    sink_class.register(key, _Committer(schema, names, begin, take, abort))
    return StagedRowsWriter(frame, key, sink_class)
