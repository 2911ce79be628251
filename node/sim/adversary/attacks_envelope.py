"""The envelope attacks every honest node must refuse (``DEFAULT_ATTACKS``): broken or lying
envelopes, signed by the adversary's own key, and a replay of an honest peer's envelope.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from swarm_node.node.sim.adversary.forge import round_answer, with_field
from swarm_node.protocol.codec import encode
from swarm_node.protocol.messages import RolloutBatch, RolloutRecord

if TYPE_CHECKING:
    from swarm_node.node.sim.adversary.peer import Adversary

log = logging.getLogger(__name__)

WRONG = "<answer>0</answer>"  # a completion to lie about


async def garbage(adv: Adversary, r: int) -> bool:
    """Random bytes instead of an envelope."""
    return await adv.publish(r, os.urandom(512))


async def bad_signature(adv: Adversary, r: int) -> bool:
    """A well-formed batch whose signature is broken."""
    data = bytearray(adv.forge.seal(encode(adv.forge.batch(r, WRONG))))
    data[-7] ^= 0xFF
    return await adv.publish(r, bytes(data))


async def forged_reward(adv: Adversary, r: int) -> bool:
    """A batch whose records carry a "reward" field."""
    return await adv.publish(r, adv.forge.seal(with_field(adv.forge.batch(r, WRONG), "reward", 1.0)))


async def forged_truth(adv: Adversary, r: int) -> bool:
    """A batch whose records carry a "ground_truth" field."""
    return await adv.publish(r, adv.forge.seal(with_field(adv.forge.batch(r, WRONG), "ground_truth", "0")))


async def text_mismatch(adv: Adversary, r: int) -> bool:
    """The right answer as text over other token ids."""
    b = adv.forge.batch(r, WRONG)
    lie = tuple(RolloutRecord(x.task_id, x.completion_ids, f"<answer>{round_answer(r)}</answer>",
                              x.behaviour_logprobs, x.truncated) for x in b.rollouts)
    return await adv.publish(r, adv.forge.seal(encode(RolloutBatch(**{**b.__dict__, "rollouts": lie}))))


async def impersonation(adv: Adversary, r: int) -> bool:
    """A batch signed by the adversary, naming an honest peer as its sender."""
    victim = next(iter(adv.victims), None)
    if victim is None:
        return False
    return await adv.publish(r, adv.forge.seal(encode(adv.forge.batch(r, WRONG, sender=victim))))


async def replay(adv: Adversary, r: int) -> bool:
    """Re-publish a peer's old envelope under that peer's subkey for the previous round.

    The in-memory transport lets anyone write any subkey, so there the envelope reaches the
    receivers and the replay check must catch it (it is authentic: only replay detection
    can). Over hivemind, index entries are owner-signed and the write is refused before it
    reaches anyone (counted in ``refused``)."""
    # The newest envelope older than r - 1: old enough to be a replay, fresh enough to pass the
    # clock check (which comes first) so that it is caught as what it is.
    old = [(rr, p, d) for p, by_round in adv.victims.items() for rr, d in by_round.items() if rr < r - 1]
    if not old:
        return False
    _, peer, data = max(old)
    outlive = (adv.cfg.swarm.max_round_lag + 3) * adv.clock.round_seconds  # a round past the owner's entry
    try:
        await adv.transport.publish_as(peer, r - 1, data, outlive)
    except PermissionError as e:  # the hivemind index is owner-signed: this write is refused
        adv.refused["replay"] += 1
        log.info("replay refused by the transport: %s", e)
        return False
    return True
