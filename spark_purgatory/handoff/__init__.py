"""The cross-shard hand-off: what one shard's call passes to another's, between micro-batches.

A micro-batch runs one Spark task per shard group, and two things need a second shard's answer:

* **relays** (``engine.relay``): an operation whose keys live in several shards is decided in
  the cross-shard group (number ``shards``); each primary shard of its keys holds a *stub*
  whose matches, and later a *notice* of whether each paired event was counted, travel there;
* **claims and verdicts** (``engine.registry``): a single-shard operation whose op_id's
  *registry* shard is not its home is *parked* at home for one call while a *claim* goes to
  the registry, which answers with a *verdict* (admit, or ``duplicate_op_id``).

Both travel as files beside the shard state, one per (micro-batch, sender), written in
micro-batch N (``Mailbox``) and read by the receiver in its first call after N.  When nothing
would call the receiver, the driver asks for one more micro-batch through the wake directory
(``Wake``), which the stream reads as a third input.

**A worked example.**  Two shards and the cross-shard group 2; ``o1`` watches keys ``a``
(shard 0) and ``b`` (shard 1), ``o2`` watches ``c`` (shard 0) and its op_id's registry is
shard 1.  In micro-batch N:

1. routing sends ``o1`` to group 2 and a stub of it to shards 0 and 1; ``o2`` to shard 0 and a
   claim ``(o2, ts, deadline, home 0)`` to shard 1; an event on ``a`` goes to shard 0.
2. shard 0 parks ``o2`` and its stub of ``o1`` matches the event; it posts the pair to
   ``mailbox/<N>-000000.arrow``.  Shard 1 posts its verdict on the claim to
   ``verdicts/000000/<N>-000001.arrow``.  The receivers keep an event-time timeout at N's
   watermark, so the next micro-batch that moves it calls them.
3. the driver, once N's output is written, sees that N relayed and writes the wake file.
4. in N+1 group 2 receives the pair and completes ``o1`` (``resolved_at``: the event's time,
   one micro-batch later, as the contract allows); shard 0 receives the verdict and registers
   ``o2`` against every event of its window still buffered.
5. when the watermark passes the event, shard 0 relays its notice; group 2 records it as
   counted, so the event is never reported in ``unmatched_events``.

Invariants:

* a receiver gets every file posted for it before its micro-batch, exactly once: it keeps the
  last micro-batch it received in its state, files go only once a *later* call received
  them, and a replay receives the same files again;
* expiry never overtakes a relay (``mailbox`` proves it);
* a parked operation loses no event: its ``ts`` is at or past the watermark that parked it.
"""

from .end_of_input import EndOfInput, InputEndedError
from .mailbox import Mailbox
from .shard_handoff import Received, ShardHandOff
from .wake import Wake

__all__ = ["EndOfInput", "InputEndedError", "Mailbox", "Received", "ShardHandOff", "Wake"]
