"""The project as a user gets it: its wheel, built from this checkout, installed with uv into a
fresh virtual environment outside the checkout, with nothing else (its dependencies resolved as
pip resolves them: the newest pyspark the wheel allows, not the tests' pin).  The tests
(``tests/docs/test_wheel_install.py``, ``tests/spark/test_distributed.py``) and the ``install``
benchmark make it the same way.

uv's cache is the machine's (``~/.cache/uv``, shared with ``make setup``): the packages the dev
venv has are linked from it, and a pyspark the cache lacks is built once, stored (``make
setup``'s ``--compression=stored``: the same JARs, no zip compression).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

__all__ = ["ROOT", "build_wheel", "install_wheel", "uninstall", "venv_env"]

#: the checkout the wheel is built from
ROOT = Path(__file__).resolve().parent.parent

#: as the Makefile builds pyspark's wheel (only a source archive is published)
_STORED = "-C--build-option=--compression=stored"


def _uv() -> str:
    return str(Path(sys.executable).parent / "uv")  # make setup installs it into the venv


def build_wheel(out: Path) -> Path:
    """The sdist and, from it, the wheel (``make dist``'s ``uv build``: the in-tree backend,
    the project's JARs as package data) into ``out``; the wheel's path."""
    done = subprocess.run(
        [_uv(), "build", "--quiet", "--python", sys.executable, "--out-dir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"uv build failed:\n{done.stderr[-4000:]}")
    (wheel,) = out.glob("spark_purgatory-*.whl")
    return wheel


def install_wheel(
    wheel: Path,
    venv: Path,
    *,
    bytecode: bool = True,
    also: tuple[str, ...] = (),
    extras: tuple[str, ...] = (),
) -> Path:
    """A new venv at ``venv`` (this Python's version) with ``wheel`` and what it requires, and
    nothing else; its ``python``.

    ``bytecode``: compile every installed module, as ``pip install`` does by default (uv does
    not; with ``PYTHONDONTWRITEBYTECODE`` set, as on these machines, each process compiles
    pandas, pyarrow and pyspark again: what ``make bytecode`` spares the checkout's venv).  Once
    here, about 10 CPU-s; without it ``spark-purgatory --version`` took 23-25 s at a load of 13
    instead of 4, and each Spark Python worker compiles its imports again.
    ``also``: more requirements (``pyspark==4.2.0``: the tests' pin instead of pip's newest).
    ``extras``: the wheel's extras to install with it (``("kafka",)``: ``pip install 'x.whl[kafka]'``).

    The index is asked which versions are newest (its pages only), and the install is tried from
    uv's cache alone (``--offline``), those versions pinned: an index that sends no caching
    headers (this machine's) makes every online install download pyspark's 450 MB source archive
    and build it again (30-120 s, and 1.4 GB more of uv's cache each time).  What the cache lacks
    (a newer pyspark than it has built) is installed online as before.
    """
    python = venv / "bin" / "python"
    _run([_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)])
    install = [_uv(), "pip", "install", "--quiet", "--python", str(python), _STORED]
    install += ["--compile-bytecode"] if bytecode else []
    target = f"spark-purgatory[{','.join(extras)}] @ {wheel.resolve().as_uri()}" if extras else str(wheel)
    newest = _newest([*_requirements(wheel, extras), *also])
    if _run([*install, "--offline", target, *newest], check=False).returncode != 0:
        _run([*install, target, *also])  # the cache lacks some of them: online
    return python


def _requirements(wheel: Path, extras: tuple[str, ...] = ()) -> list[str]:
    """The wheel's own requirements (its METADATA's ``Requires-Dist`` without an extra, and
    those of ``extras`` without their marker)."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    found = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    wanted = [r for r in found if any(f'extra == "{e}"' in r for e in extras)]
    return [r for r in found if "extra ==" not in r] + [r.split(";", 1)[0].strip() for r in wanted]


def _newest(requirements: list[str]) -> list[str]:
    """``requirements`` each pinned to the newest version the index has for it (``name==x``):
    the index's pages alone, no archive fetched (``--no-deps``: no package's metadata needed)."""
    done = _run(
        [_uv(), "pip", "compile", "--quiet", "--no-deps", "--no-header", "--no-annotate"]
        + ["--python", sys.executable, "-"],
        stdin="\n".join(requirements),
    )
    return [line.strip() for line in done.stdout.splitlines() if "==" in line]


def _run(command: list[str], *, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=900, env=_without_venv()
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed:\n{done.stderr[-4000:]}")
    return done


def uninstall(python: Path, package: str) -> None:
    """Take ``package`` out of ``python``'s venv, its requirements left (a cluster node's
    Python, which gets the package from ``--py-files``)."""
    _run([_uv(), "pip", "uninstall", "--quiet", "--python", str(python), package])


def _without_venv() -> dict[str, str]:
    """This environment without the dev venv's traces (an activated venv, the checkout on the path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    dev_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != dev_bin)
    return env


def unactivated_env(**more: str) -> dict[str, str]:
    """The environment of a shell where no venv is activated and the PATH's ``python3`` is the
    system's (a user running ``.venv/bin/python script.py``)."""
    return {**_without_venv(), "PATH": "/usr/bin:/bin", **more}


def venv_env(python: Path, **more: str) -> dict[str, str]:
    """The environment of a shell with the wheel's venv activated: its ``bin`` first on PATH
    (Spark's Python workers run ``python3`` from there, as in a user's activated venv)."""
    env = _without_venv()
    venv = python.parent.parent
    env.update(VIRTUAL_ENV=str(venv), PATH=os.pathsep.join([str(venv / "bin"), env["PATH"]]), **more)
    return env
