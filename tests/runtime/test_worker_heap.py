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
