"""The shard step's heap settling (``runtime.worker_heap``): in a fresh interpreter, as a
Python worker is, because a freeze lasts for the process."""

import subprocess
import sys

_PROBE = r"""
import gc, weakref
from spark_purgatory.runtime.worker_heap import freeze_heap

class Node:
    pass

before = Node(); before.me = before; before_ref = weakref.ref(before); del before
held = [Node()]; held_ref = weakref.ref(held[0])  # live at the freeze
freeze_heap()
frozen = gc.get_freeze_count()
assert frozen > 10_000, frozen  # the interpreter's modules (pandas, pyarrow...) are frozen
assert before_ref() is None     # cyclic garbage left before the freeze was collected first

freeze_heap()  # once per process: a later call changes nothing
assert gc.get_freeze_count() == frozen

after = Node(); after.me = after; after_ref = weakref.ref(after); del after
gc.collect()
assert after_ref() is None      # what the shard makes afterwards is collected as before

del held                        # a frozen object no longer referenced is still freed (refcount)
assert held_ref() is None
print("ok")
"""


def test_settle_freezes_the_workers_modules_once_and_later_garbage_is_still_collected():
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_collector_is_paused_inside_and_restored_as_it_was_after():
    import gc

    import pytest

    from spark_purgatory.engine.collector import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():  # an error in the call: restored too
        raise RuntimeError("shard call failed")
    assert gc.isenabled()
    gc.disable()  # a host that runs without the collector keeps it off
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_shard_step_runs_without_collector_walks_and_gives_the_collector_back():
    """The stream's shard step (``operator._stateful_shard``, the adapter of ``ShardStep``)
    processes its rows with the collector off and leaves it on for the worker's next task."""
    import gc

    import pandas as pd

    from spark_purgatory import PurgatoryConfig
    from spark_purgatory.engine.purgatory import Purgatory
    from spark_purgatory.shard.roles import ROUTED_COLUMNS
    from spark_purgatory.spark import operator
    from spark_purgatory.testing.local_shards import LocalGroupState

    seen = []
    process = Purgatory.process

    def watched(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return process(self, *args, **kwargs)

    step = operator._stateful_shard(PurgatoryConfig(shards=1, cross_shard_operations=False))
    rows = pd.DataFrame({name: pd.Series([], dtype=object) for name in ROUTED_COLUMNS})
    Purgatory.process = watched
    try:
        out = list(step((0,), iter([rows]), LocalGroupState().called(0, 1_000)))
    finally:
        Purgatory.process = process
    assert seen == [False]
    assert len(out) == 1 and gc.isenabled()
