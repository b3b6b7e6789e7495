"""Read-ahead: a Python worker brings the other shards parked in it forward between tasks.

PySpark hands a task whichever worker has waited longest, so a load often finds an older
version parked.  While the worker idles after a shard call, a thread waits for the delta file
each other shard parked here writes in the same micro-batch and brings that shard forward, so
its next load here is ``exact``.  Only the speed changes: anything that fails leaves the
shard out of the cache.  Local stores only.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from ..config import PurgatoryConfig
from .cache import WORKER_CACHE, WorkerCache
from .increments import DELTAS, directory_of, pointer
from .segments import SegmentStore
from .shard_load import load_state
from .shard_state import Lineage

log = logging.getLogger(__name__)


@dataclass
class _Wanted:
    """A parked shard to bring to ``version`` once its delta file of that version is there."""

    store: SegmentStore
    config: PurgatoryConfig | None
    directory: str  # its delta files' directory, relative to the store's root
    local: str  # the same on this machine's file system
    prefix: str  # its delta file's name up to the token: ``<version>.<lineage>.``
    token: str  # the version parked, which the file must extend
    until: float  # when to stop waiting (time.monotonic())


class ReadAhead:
    """One worker's read-ahead: ``after_call`` after each shard call; one thread at a time.

    ``patience``: seconds a shard's file of the micro-batch is waited for (a shard Spark did
    not call writes none); ``poll``: seconds between two looks at a directory."""

    def __init__(
        self, cache: WorkerCache | None = None, *, patience: float = 30.0, poll: float = 0.005
    ) -> None:
        self.cache = cache or WORKER_CACHE
        self.patience = patience
        self.poll = poll
        self._lock = threading.Lock()
        self._wanted: dict[str, _Wanted] = {}  # by lineage
        self._thread: threading.Thread | None = None
        self._stores: dict[str, set[str]] = {}  # lineages seen per store root
        self.forwarded = 0  # shards brought forward

    def after_call(
        self, store: SegmentStore | None, config: PurgatoryConfig | None, lineage: str, version: int
    ) -> None:
        """``lineage`` just saved and parked ``version``: bring the others forward to it."""
        if store is None or store.local_directory(DELTAS) is None:
            return
        until = time.monotonic() + self.patience
        with self._lock:
            known = self._stores.setdefault(store.root, set())
            known.add(lineage)
            self._wanted.pop(lineage, None)  # this worker holds its newest version
            for other, token, obj in self.cache.parked():
                lineage_of = getattr(obj, "lineage", None)
                if other == lineage or other not in known or not isinstance(lineage_of, Lineage):
                    continue
                if lineage_of.version >= version:
                    continue
                directory = directory_of(obj.shard)
                local = store.local_directory(directory)
                assert local is not None
                prefix = f"{version:016d}.{other}."
                self._wanted[other] = _Wanted(store, config, directory, local, prefix, token, until)
            if self._wanted and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="purgatory-read-ahead", daemon=True)
                self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until nothing is left to bring forward; False when ``timeout`` passed first."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                for lineage in [k for k, w in self._wanted.items() if w.until < now]:
                    del self._wanted[lineage]
                if not self._wanted:
                    self._thread = None
                    return
                wanted = list(self._wanted.items())
            for lineage, want in wanted:
                name = _found(want)
                if name is not None and self._forward(lineage, want, name):
                    with self._lock:
                        if self._wanted.get(lineage) is want:
                            del self._wanted[lineage]
            time.sleep(self.poll)

    def _forward(self, lineage: str, want: _Wanted, name: str) -> bool:
        """Bring the parked shard forward to the delta file ``name``; True when done with it."""
        try:
            parts, _meta = want.store.read(name)
        except Exception:  # noqa: BLE001 - not readable yet (being written): try again
            return False
        if not parts:  # only its schema written so far: try again
            return False
        obj = self.cache.take(lineage, want.token)
        if obj is None:  # claimed by a load, or parked anew: nothing to do
            return True
        loaded = None
        try:
            one = WorkerCache(entries=1)
            one.park(lineage, want.token, obj)
            loaded = load_state(pointer(name), want.config, want.store, cache=one)
            self.forwarded += 1
        except Exception as exc:  # noqa: BLE001 - the shard is left out: its next load rebuilds
            log.debug("read-ahead of %s to %s failed: %s", lineage, name, exc)
        finally:
            token = loaded.lineage.token if loaded is not None else None
            self.cache.give_back(lineage, token, loaded)
        return True


def _found(want: _Wanted) -> str | None:
    """The delta file of the version and lineage wanted, if it is there."""
    try:
        names = os.listdir(want.local)
    except OSError:
        return None
    for file in names:
        if file.startswith(want.prefix) and file.endswith(".arrow"):
            return f"{want.directory}/{file}"
    return None


#: this Python worker's read-ahead
READ_AHEAD = ReadAhead()


def read_ahead(
    store: SegmentStore | None, config: PurgatoryConfig | None, lineage: str, version: int
) -> None:
    """``READ_AHEAD.after_call`` (a function, so that the shard step's closure does not
    pickle the worker's object with its threads and locks)."""
    READ_AHEAD.after_call(store, config, lineage, version)
