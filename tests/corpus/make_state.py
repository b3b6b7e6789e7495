"""Writes a ``state_vN`` directory of this corpus with a spark-purgatory that saves format N,
for ``test_state``'s compatibility tests (format 2: before the columnar engine, e.g. commit
e6e9152; format 3: the columnar engine before compact strings, e.g. commit 9e23da1; format 4:
spark-purgatory 0.2.0, e.g. commit 003009c), run from a copy of that commit's tree with this
script in it (the script puts its own tree first on the path):

    mkdir /tmp/engine-v4 && git archive 003009c | tar -x -C /tmp/engine-v4
    cp tests/corpus/make_state.py /tmp/engine-v4/tests/corpus/
    (cd /tmp/engine-v4 && python tests/corpus/make_state.py $OLDPWD/tests/corpus/state_v4)

``value.arrow``: the whole state in the value; ``segmented.arrow``: a value extending the
base segment in ``segments/`` with a change (its tails).  ``test_state.two_batches`` is the
scenario (kept in step with ``_first``, ``_second`` here).  Format 4 only (0.2.0, before
``quorum``): ``count_members.arrow``, a ``count`` operation sent with ``members``, which 0.2.0
accepted and decided counting every source (``_count_with_members``).
"""

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the root: tests.support.engine_helpers
from spark_purgatory.state import STATE_VERSION, SegmentStore, save_state  # noqa: E402
from tests.support.engine_helpers import ev, op, purgatory, step  # noqa: E402


def _first(p):
    ops = [
        op("a", ["k1", "k2"], 0, condition="count", target=2),
        op("b", "k2", 0, timeout_ms=500),
        op("c", "k3", 0, condition="offset", target=9),
        *[op(f"o{i}", f"m{i % 7}", 0, timeout_ms=3000) for i in range(60)],
    ]
    step(p, ops=ops, events=[ev("k1", 3, source="s1"), ev("q", 2), ev("k3", 1, value=4.0)], wm=0)


def _count_with_members(p):
    """Pending in the value: ``count-2`` (target 2, members ann and bo), one event of mallory,
    who is no member, counted (0.2.0 did not read members for count)."""
    count_2 = op("count-2", "k", 0, timeout_ms=5000, condition="count", target=2, members=["ann", "bo"])
    step(p, ops=[count_2], events=[ev("k", 10, source="mallory")], wm=0)


def _second(p):
    step(
        p, ops=[op(f"n{i}", f"m{i % 5}", 10, timeout_ms=2000) for i in range(30)], events=[ev("m1", 12)], wm=5
    )


if __name__ == "__main__":
    out = sys.argv[1]
    version = int(Path(out).name.removeprefix("state_v"))  # the directory names the format
    assert STATE_VERSION == version, f"{out}: run this with a spark-purgatory that writes format {version}"
    shutil.rmtree(out + "/segments", ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    p = purgatory()
    _first(p)
    _second(p)
    Path(out, "value.arrow").write_bytes(save_state(p))
    p = purgatory()
    store = SegmentStore(f"{out}/segments", segment_rows=40, retain_versions=50)
    _first(p)
    save_state(p, store)  # the base segment
    _second(p)
    Path(out, "segmented.arrow").write_bytes(save_state(p, store))  # the base and a change
    if version == 4:
        p = purgatory()
        _count_with_members(p)
        assert p.pending == 1, "count with members is accepted only up to 0.2.0 (format 4)"
        Path(out, "count_members.arrow").write_bytes(save_state(p))
