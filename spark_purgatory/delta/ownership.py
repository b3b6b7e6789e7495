"""One writer per output: the tables record the checkpoint whose query writes them.

Delta's app transactions dedupe only under one app id, which belongs to the checkpoint: a job
on another checkpoint but the same tables would commit every outcome twice.  So each table
records its owner in its properties, and ``claim_tables`` refuses a table owned by another
checkpoint (``OutputOwnedError``) unless ``output.take.over`` is set.

Invariant: after ``claim_tables`` returns, every table names this checkpoint as its owner.
"""

from __future__ import annotations

import logging
from typing import Any

from ..contract import TABLES
from .writers import commit_properties, open_table

log = logging.getLogger(__name__)

OWNER = "purgatory.owner"  # the owning checkpoint's app id
OWNER_CHECKPOINT = "purgatory.owner.checkpoint"


class OutputOwnedError(RuntimeError):
    """The output tables belong to another checkpoint's query (one line, with what to do)."""


def owner_of(writer: Any, table: str) -> tuple[str, str] | None:
    """``(app id, checkpoint)`` recorded by ``table``, None when it records none."""
    opened = open_table(writer.path(table), writer.storage_options)
    if opened is None:
        return None
    configuration = opened.metadata().configuration
    if not configuration.get(OWNER):
        return None
    return configuration[OWNER], configuration.get(OWNER_CHECKPOINT, "?")


def check_owner(
    writer: Any, *, app_id: str, checkpoint: str, take_over: bool = False
) -> dict[str, tuple[str, str] | None]:
    """The tables ``writer`` writes not recorded as ``app_id``'s, with their owners; raise
    ``OutputOwnedError`` if one belongs to another checkpoint, unless ``take_over``."""
    owners = {table: owner_of(writer, table) for table in TABLES}
    others = {table: owner for table, owner in owners.items() if owner is None or owner[0] != app_id}
    taken = {table: owner for table, owner in others.items() if owner is not None}
    if taken and not take_over:
        raise OutputOwnedError(_refusal(writer, taken, checkpoint))
    return others


def claim_tables(writer: Any, *, app_id: str, checkpoint: str, take_over: bool = False) -> None:
    """Make the checkpoint ``app_id`` the owner of every table ``writer`` writes, or raise
    ``OutputOwnedError`` if another checkpoint owns one and ``take_over`` is False.  A writer
    with no table paths (your own ``TableWriter``) is left alone."""
    if not hasattr(writer, "path") or not hasattr(writer, "storage_options"):
        return
    others = check_owner(writer, app_id=app_id, checkpoint=checkpoint, take_over=take_over)
    for table, owner in others.items():
        if owner is not None:
            shown = _shown(writer, table)
            log.warning("taking %s over from checkpoint %s (output.take.over)", shown, owner[1])
        _record_owner(writer, table, app_id, checkpoint)
    for table in others:  # two starts racing for new tables: the last writer keeps them
        owner = owner_of(writer, table)
        if owner is not None and owner[0] != app_id:
            raise OutputOwnedError(_refusal(writer, {table: owner}, checkpoint))


def _refusal(writer: Any, taken: dict[str, tuple[str, str]], checkpoint: str) -> str:
    table, (_, other) = next(iter(taken.items()))
    return (
        f"output table {_shown(writer, table)} belongs to the query of checkpoint {other}, not {checkpoint}: "
        "two queries would write every outcome twice; use that checkpoint, or another output, or "
        "--take-over-output (output.take.over=true) if that query is gone for good"
    )


def _shown(writer: Any, table: str) -> str:
    tables = getattr(writer, "tables", None)
    return tables.name(table) if tables is not None else writer.path(table)


def _record_owner(writer: Any, table: str, app_id: str, checkpoint: str) -> None:
    properties = {OWNER: app_id, OWNER_CHECKPOINT: checkpoint}
    spark = getattr(writer, "spark", None)
    tables = getattr(writer, "tables", None)  # catalog tables: by name
    if spark is None or tables is None:
        # a table by path, also Spark's writer's: through delta-rs, so that no SQL statement
        # makes Spark create its catalog's warehouse directory where the job runs
        try:
            opened = open_table(writer.path(table), writer.storage_options)
            opened.alter.set_table_properties(
                properties, raise_if_not_exists=False, commit_properties=commit_properties()
            )
            return
        except Exception:
            if spark is None:
                raise
            log.debug("delta-rs cannot set %s's properties: through Spark", writer.path(table), exc_info=True)
    name = tables.quoted(table) if tables is not None else f"delta.`{writer.path(table)}`"
    pairs = ", ".join(f"'{key}' = '{_sql_text(value)}'" for key, value in properties.items())
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({pairs})")


def _sql_text(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")
