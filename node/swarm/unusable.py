"""Senders whose batches this node can use none of, round after round: when to back them off.

A batch whose every group is of a task family this node has not loaded (another dataset, or
another version of it: the family's name carries its content's digest, rewards/sources.py) is
refused as ``unknown_family`` (node/swarm/admission.py): not pooled, and over a carrier that
forwards, not passed on. One such batch is no fault (a peer may be updating its data); a
sustained run of them costs the sender what any useless sender pays: the exchange asks the
carrier to back it off (``Transport.distrust``), so it no longer takes a fetch slot or a check
a round. Keys are free, so a flood of fresh keys, each sending one such batch, is bounded
elsewhere (a carrier's budget for publishers with no history, and never forwarded); this ledger
bounds the one sender that keeps at it.

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
        """``sender``'s batch for ``round`` held nothing this node can use; True when its run has
        reached ``run_rounds`` distinct rounds (back it off now, and at each such batch after).
        A second batch labelled with a round already counted adds nothing: a run is of rounds."""
        entry = self._runs.get(sender)
        if entry is None:
            entry = self._runs[sender] = [0, round - 1]
            if len(self._runs) > self.limit:
                self._runs.popitem(last=False)
        self._runs.move_to_end(sender)
        if round != entry[1]:
            entry[0] += 1
            entry[1] = round
        return entry[0] >= self.run_rounds

    def usable(self, sender: str) -> None:
        """``sender``'s batch gave this node a group: its run ends."""
        self._runs.pop(sender, None)
