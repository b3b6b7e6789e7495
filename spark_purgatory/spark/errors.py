"""Errors from a micro-batch, told by their first cause.

A failed micro-batch reaches the driver as nested wrappers with the cause somewhere in the
middle.  ``first_cause`` finds it, in this order:

* a Python traceback's exception line, unless it is only py4j reporting a JVM error;
* else the first JVM exception line (``: <exception>`` or ``Caused by:``) whose error class
  is not a wrapper;
* else what the query ``terminated with exception:``, unless that is a wrapper too;
* else the deepest ``Caused by:``, else the first line.

``MicroBatchError`` puts it in its first line and keeps Spark's error as ``__cause__``.
"""

from __future__ import annotations

import re

_WRAPPERS = ("STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR", "TASK_WRITE_FAILED")
_ERROR_CLASS = re.compile(r"\[([A-Z_]+(?:\.[A-Z_]+)*)\]")
_THROWN = r"(Caused by: |: )"  # how a JVM error's line starts: a cause, or what a Java call threw (py4j)
_EXCEPTION = r"([a-z]+\.)+[A-Za-z]*(Exception|Error)[A-Za-z]*: "
_JAVA_PREFIX = re.compile(f"^{_THROWN}?{_EXCEPTION}")
#: a JVM exception's line: py4j's ``: <exception>: ...`` (what a Java call threw), or a cause
_JAVA_LINE = re.compile(f"^{_THROWN}{_EXCEPTION}")
_PY4J = "py4j.protocol.Py4JJavaError"
_TERMINATED = "terminated with exception: "  # the first line of Spark's STREAM_FAILED


class MicroBatchError(RuntimeError):
    """A micro-batch failed; the message's first line is its first cause (``first_cause``),
    Spark's full error is ``__cause__``."""


def _python_causes(text: str) -> list[str]:
    """The exception line of each Python traceback in ``text``, in order."""
    causes = []
    for block in text.split("Traceback (most recent call last):")[1:]:
        for line in block.splitlines()[1:]:
            if line and not line[0].isspace():
                causes.append(line.strip())
                break
    return causes


def first_cause(error: BaseException | str) -> str:
    """One line: what made the micro-batch fail (module docstring)."""
    text = str(error)
    for cause in _python_causes(text):
        if not cause.startswith(_PY4J):
            return cause
    thrown = [line.strip() for line in text.splitlines() if _JAVA_LINE.match(line)]
    for line in thrown:
        classes = _ERROR_CLASS.findall(line)
        if classes and not all(_is_wrapper(c) for c in classes):
            return _JAVA_PREFIX.sub("", line)
    told = _terminated_with(_first_line(text))
    if told is not None:
        return told
    caused = [line.strip() for line in text.splitlines() if line.startswith("Caused by: ")]
    if caused:
        return _JAVA_PREFIX.sub("", caused[-1])
    return _first_line(text) or type(error).__name__


def _is_wrapper(error_class: str) -> bool:
    """Is ``error_class`` (``A.B``) one of Spark's wrappers around the cause?"""
    return error_class.split(".")[0] in _WRAPPERS


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _terminated_with(first: str) -> str | None:
    """What the ``first`` line says the query terminated with, when that is not a wrapper."""
    told = first.partition(_TERMINATED)[2].strip()
    if not told:
        return None
    leading = _ERROR_CLASS.match(told)  # the error class it begins with, if any
    return None if leading and _is_wrapper(leading.group(1)) else told


def micro_batch_error(error: BaseException) -> MicroBatchError:
    """``error`` (Spark's) as a ``MicroBatchError`` whose first line is its first cause, with
    what to do where the cause says it (a worker without the project's modules)."""
    cause = first_cause(error)
    if "ModuleNotFoundError" in cause:
        cause += (
            " (in Spark's Python workers: set spark.pyspark.python or PYSPARK_PYTHON to an "
            "interpreter that has spark-purgatory, pyarrow and pandas)"
        )
    return MicroBatchError(f"{cause}\nthe micro-batch failed; Spark's full error is chained below")
