"""Senders whose batches this node can use none of, round after round: when to back them off.

A batch whose every group is of a task family this node has not loaded (another dataset, or
another version of it: the family's name carries its content's digest, rewards/sources.py) is
refused as ``unknown_family`` (node/swarm/admission.py): not pooled, no rejection. Over gossip it
is still passed on, as a stale batch is: other nodes may hold that family, and nodes that lack it
must not cut off the ones sharing a dataset from each other (in a gossip mesh they reach each
other through nodes that do not have it). One such batch is no fault (a peer may be updating its
data); a sustained run of them costs the sender what any useless sender pays where the carrier
pays per fetch: the exchange asks it to back the sender off (``Transport.distrust``: hivemind),
so it no longer takes a fetch slot a round. Keys are free, so a flood of fresh keys, each
sending one such batch, is bounded elsewhere: the carriers' budgets for publishers with no
history (hivemind's fetch budget, libp2p's strangers' check budget), which bound a flood of
valid batches of known families just the same.

Pure bookkeeping, bounded: at most ``LIMIT`` senders, the least recently heard go first.
"""

from __future__ import annotations

import collections

__all__ = ["UnusableRuns", "RUN_ROUNDS", "LIMIT"]

RUN_ROUNDS = 3  # distinct rounds of nothing usable in a row before the sender is backed off
LIMIT = 4096  # senders remembered (a fresh key costs nothing: the oldest are forgotten)


class UnusableRuns:
    def __init__(self, run_rounds: int = RUN_ROUNDS, limit: int = LIMIT):
        self.run_rounds = run_rounds
        self.limit = limit
        # sender -> [rounds in the current run, the last such round]
        self._runs: collections.OrderedDict[str, list[int]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._runs)

    def run_of(self, sender: str) -> int:
        """The rounds of ``sender``'s current run of unusable batches (0: none)."""
        entry = self._runs.get(sender)
        return 0 if entry is None else entry[0]

    def unusable(self, sender: str, round: int) -> bool:
        """``sender``'s batch for ``round`` held nothing this node can use; True when this round
        took its run to ``run_rounds`` distinct rounds or past (back it off now, and at each new
        such round after: the carrier's back-off doubles). A batch labelled with the round last
        counted adds nothing and signals nothing: a peer that republishes a round after a restart
        is not struck twice for it."""
        entry = self._runs.get(sender)
        if entry is None:
            entry = self._runs[sender] = [0, round - 1]
            if len(self._runs) > self.limit:
                self._runs.popitem(last=False)
        self._runs.move_to_end(sender)
        if round == entry[1]:
            return False
        entry[0] += 1
        entry[1] = round
        return entry[0] >= self.run_rounds

    def usable(self, sender: str) -> None:
        """``sender``'s batch gave this node a group: its run ends."""
        self._runs.pop(sender, None)
