"""primary_backup's planted bugs: the design with one realistic mistake each, for `lab mutants` and
the last line of `lab conform primary_backup` (the lab must catch every one; a mutant it misses is
a blind spot in your promises or in the lab's faults).

A mutant replaces one method of the real core by a copy with the mistake; it is planted in
the sim world and in the live world's server processes alike.
"""

from __future__ import annotations

from pathlib import Path

from primary_backup.core.queue import PEER_TIMEOUT_S, Node
from lab.design import Mutant, Patch



def _scenario(name: str) -> str:
    """A scenario of the design's own, by its path (the hunt writes its runs under the
    results folder, whatever the path)."""
    return str(Path(__file__).parent / "workloads" / f"{name}.yaml")


#: the primary crashes with a backlog waiting (the lab's crash-one crashes the backup at seeds 1-3)
CRASH_PRIMARY = _scenario("crash-primary")
BATCH_S = 0.02  # the mutant's replication batch: ops wait this long before they go to the backup


async def _replicate_after_the_ack(self: Node, op: tuple) -> None:
    """``Node._replicate`` "taken off the put's latency": the op is applied here and handed to a
    replication batch that goes to the backup a moment later, and the client is answered at
    once — before the backup confirmed. A crash of the primary loses the batch in flight,
    although the backup was up and in step (no degraded acknowledgement excuses it)."""
    seq = self._apply(op)
    if not (self.synced or self.syncing):
        return
    epoch = self.epoch

    async def later() -> None:
        await self.rt.sleep(BATCH_S)
        if self.role == "primary" and self.epoch == epoch:
            self._peer_says(await self._call(("op", epoch, seq, op), PEER_TIMEOUT_S))

    self.rt.spawn(later(), name=f"{self.name} replicate {seq}")  # the bug: not awaited


MUTANTS = [
    Mutant("primary_backup-ack-before-backup", "primary_backup",
           "no loss of an acknowledged put while both nodes were up",
           "the primary acknowledges a put once it is queued for the backup, before the backup confirmed",
           (Patch(Node, "_replicate", _replicate_after_the_ack),),
           scenarios=(CRASH_PRIMARY, "disk-loss-one", "crash-one")),
]
