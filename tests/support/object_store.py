"""The tests' S3-compatible object store on loopback: moto's server, one bucket
(``testbed.services.S3Store``, which the soak starts too), and a check of segment files on it.
"""

from __future__ import annotations

from testbed.services import BUCKET, ENV, REGION, S3Store

__all__ = ["BUCKET", "ENV", "REGION", "S3Store", "check_segment_files"]


def check_segment_files(uri: str, storage) -> None:
    """Segment files at ``uri`` round-trip, also through a pickled store (as executors get it)."""
    import pickle

    from spark_purgatory.state import SegmentStore

    store = SegmentStore(uri, storage=storage)
    name = store.write("base", {"a": b"xyz"}, {"shard": "0"})
    again = pickle.loads(pickle.dumps(store))
    assert again.read(name) == ({"a": b"xyz"}, {"shard": "0"})
    assert again.segments() == [name]
    again.delete([name])
    assert store.segments() == []
