"""A micro-batch's few result rows into the driver's Python, without a second SQL execution.

``DataFrame.toArrow`` starts a second SQL execution inside the micro-batch's and a socket
server for a handful of rows.  The sink JAR's ``SmallRows`` runs the same plan within the
micro-batch's execution and returns the rows as JSON through the Py4J call; where it cannot
be used the caller reads them through ``toArrow``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa

from .settings import is_connect

log = logging.getLogger(__name__)

#: the JVM class that runs a plan and writes its rows as JSON columns
SMALL_ROWS = "io.sparkpurgatory.sink.SmallRows"
#: the version of its calls this module makes (``SmallRows.VERSION``)
VERSION = 1

#: the Arrow types the JSON text carries (strings, whole numbers, booleans)
_CARRIED = (pa.types.is_string, pa.types.is_integer, pa.types.is_boolean)


def carried(type_: pa.DataType) -> bool:
    """Does the JSON text of the sink JAR's classes carry values of ``type_``?"""
    return any(is_type(type_) for is_type in _CARRIED)


class SmallRows:
    """Reads small micro-batches through ``SmallRows`` (the JVM class), looked up at the first
    call and kept: a ``foreachBatch`` function gets a new Python session object with every
    micro-batch, so the lookup is kept here, not on the session.  Picklable (Spark Connect
    pickles the sink that holds it; the lookup is made again where it runs)."""

    def __init__(self) -> None:
        self._jvm_class: Any = False  # False: not looked up yet; None: not callable here

    def __getstate__(self) -> dict:
        return {"_jvm_class": False}

    def __call__(self, frame: Any, schema: pa.Schema) -> pa.Table | None:
        """``frame``'s rows as an Arrow table of ``schema`` (its columns, in its order), run
        within the current SQL execution; None when that cannot be used here (Spark Connect,
        no JAR or one of another version, a column type the text does not carry).  An error
        of the plan itself (a failing task) is raised."""
        if not all(carried(f.type) for f in schema):
            return None
        if self._jvm_class is False:
            self._jvm_class = jvm_class(frame.sparkSession, SMALL_ROWS, VERSION)
        if self._jvm_class is None:
            return None
        return table_of(self._jvm_class.columns(frame._jdf), schema, "SmallRows")


def table_of(text: str, schema: pa.Schema, who: str) -> pa.Table:
    """The JSON text of columns the sink JAR's class ``who`` wrote (a list of each column's
    values, in ``schema``'s order) as an Arrow table of ``schema``."""
    columns = json.loads(text)
    if len(columns) != len(schema):
        raise ValueError(f"{who} gave {len(columns)} columns for a schema of {len(schema)}")
    arrays = [pa.array(values, type=f.type) for values, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def jvm_class(spark: Any, name: str, version: int) -> Any | None:
    """The sink JAR's JVM class ``name`` when ``spark`` can call it (a classic session with the
    JAR on its driver, the class's ``VERSION`` equal to ``version``), else None."""
    if is_connect(spark):
        return None
    try:
        cls = spark._jvm
        for part in name.split("."):  # a JavaPackage, not a class, when it is not loadable
            cls = getattr(cls, part)
        if getattr(cls, "VERSION", None) == version:
            return cls
        log.info("%s is not on the driver's class path (or of another version)", name)
    except Exception as exc:  # noqa: BLE001 - not callable here: the caller's other way
        log.info("%s cannot be called (%s)", name, exc)
    return None
