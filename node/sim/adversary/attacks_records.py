"""The implausible-record attacks: well-formed, signed batches (and a heartbeat) with the right
answer, whose log-probs, tokens or timestamps no honest node would send.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from swarm_node.node.sim.adversary.forge import round_answer, round_task_id
from swarm_node.protocol.codec import encode
from swarm_node.protocol.messages import Announcement

if TYPE_CHECKING:
    from swarm_node.node.sim.adversary.peer import Adversary

AN_HOUR_S = 3600.0


async def _claiming_logprob(adv: Adversary, r: int, lp: float) -> bool:
    batch = adv.forge.batch(r, f"<answer>{round_answer(r)}</answer>", lp=lp)
    return await adv.publish(r, adv.forge.seal(encode(batch)))


async def logprob_1e300(adv: Adversary, r: int) -> bool:
    """Every token's log-prob is -1e300 (-inf in float32: NaN steps for the learner)."""
    return await _claiming_logprob(adv, r, -1e300)


async def logprob_1e4(adv: Adversary, r: int) -> bool:
    """Every token's log-prob is -1e4."""
    return await _claiming_logprob(adv, r, -1e4)


async def special_tokens(adv: Adversary, r: int) -> bool:
    """A <pad> (or, without one, the EOS) in the middle of each completion."""
    tok, answer = adv.forge.tok, round_answer(r)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = adv.forge.ids("<answer>", eos=False) + (int(pad),) + adv.forge.ids(f"{answer}</answer>")
    rec = adv.forge.record(round_task_id(r), ids, -1.0)
    return await adv.publish(r, adv.forge.seal(encode(adv.forge.batch_of(r, (rec, rec)))))


async def future_created_at(adv: Adversary, r: int) -> bool:
    """``created_at`` an hour ahead of the signed time: a batch, then a heartbeat, in turn."""
    adv.created_at_turn += 1
    if adv.created_at_turn % 2 == 0:  # a heartbeat "alive for an hour"
        hb = Announcement(sender=adv.identity.peer_id, round=r, policy_version=0,
                          model_fingerprint=adv.forge.model_fingerprint,
                          tokenizer_fingerprint=adv.forge.tokenizer_fingerprint,
                          created_at=time.time() + AN_HOUR_S, addrs=())
        await adv.transport.announce(adv.forge.seal(encode(hb)), adv.publish_ttl)
        return True
    batch = adv.forge.batch(r, f"<answer>{round_answer(r)}</answer>", created_at=time.time() + AN_HOUR_S)
    return await adv.publish(r, adv.forge.seal(encode(batch)))
