"""Attacks against a running node: each is rejected under its reason, nothing rejected reaches the
learner, and the node keeps training (on its own and its honest peer's rollouts).

The node and an honest peer run their normal loops over an in-memory hub; attackers write
straight into the hub, as a hostile peer on a DHT can write any record. The same checks over
hivemind are in ``test_hivemind_swarm.py``.
"""

from __future__ import annotations

import asyncio
import time

import msgpack

from swarm_node.node.transport.base import MAX_ENVELOPE_SIZE
from swarm_node.node.transport.memory import MemoryHub
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import RolloutBatch, RolloutRecord
from swarm_node.protocol.signing import envelope_to_bytes, sign
from swarm_node.rewards.registry import make_task
from tests.helpers.swarm_helpers import create_node, run_all, swarm_cfg


def _honest_looking_batch(node, ident: Identity, r: int, text: str, task_id: str = "arithmetic:5:1") -> RolloutBatch:
    tok = node.policy.tokenizer
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"]) + (int(tok.eos_token_id),)
    rec = RolloutRecord(task_id, ids, tok.decode(list(ids), skip_special_tokens=True),
                        tuple(-1.0 for _ in ids), False)
    return RolloutBatch(sender=ident.peer_id, round=r, policy_version=0,
                        model_fingerprint=node.policy.model_fingerprint,
                        tokenizer_fingerprint=node.policy.tokenizer_fingerprint,
                        created_at=time.time(), rollouts=(rec, rec))


def _with_extra_field(payload: bytes, name: str, value) -> bytes:
    obj = msgpack.unpackb(payload, raw=False)
    for rec in obj["body"]["rollouts"]:
        rec[name] = value
    return msgpack.packb(obj, use_bin_type=True)


def _env(ident: Identity, payload: bytes, seq: int = 1) -> bytes:
    return envelope_to_bytes(sign(payload, ident, seq))


def test_attacks_are_rejected_counted_and_never_reach_the_learner(warm_tiny_model_dir, tmp_path):
    hub = MemoryHub()
    steps = 10

    async def scenario():
        victim = await create_node(swarm_cfg(warm_tiny_model_dir, tmp_path / "victim",
                                             **{"train.steps": steps, "swarm.round_seconds": 0.5}), hub)
        honest = await create_node(swarm_cfg(warm_tiny_model_dir, tmp_path / "honest",
                                             **{"train.steps": steps, "swarm.round_seconds": 0.5,
                                                "train.seed": 1}), hub)
        seen_groups: list[str] = []
        real_step = victim.learner.step

        def spy(samples):  # what actually reaches the learner
            seen_groups.extend(s.group for s in samples)
            return real_step(samples)

        victim.learner.step = spy
        swarm = victim.cfg.swarm.name
        wrong = make_task("arithmetic:5:1").answer + "1"
        right = make_task("arithmetic:5:1").answer

        async def attack():
            # Wait until the victim has admitted two honest rounds k < k2: re-publishing k's bytes
            # under (k2, honest) is a replay (a new index entry, an envelope already seen).
            def admitted_rounds():
                return sorted(r for (sender, r) in victim.swarm._batches if sender == honest.swarm.peer_id)

            while len(admitted_rounds()) < 2:
                await asyncio.sleep(0.05)
            k, k2 = admitted_rounds()[:2]
            r = victim.swarm.clock.current()
            honest_bytes = hub.records[(swarm, k)][honest.swarm.peer_id][0]
            attackers = {name: Identity.generate() for name in (
                "malformed", "oversized", "bad_signature", "forged_reward",
                "forged_reward_text", "forged_ground_truth", "unknown_task", "impersonation")}
            a = attackers
            good = lambda who, text=wrong: encode(_honest_looking_batch(victim, a[who], r, text))  # noqa: E731
            bad_sig = bytearray(_env(a["bad_signature"], good("bad_signature")))
            bad_sig[-5] ^= 0xFF
            text_lie = _honest_looking_batch(victim, a["forged_reward_text"], r, wrong)
            text_lie = RolloutBatch(**{**text_lie.__dict__, "rollouts": tuple(
                RolloutRecord(x.task_id, x.completion_ids, f"<answer>{right}</answer>",
                              x.behaviour_logprobs, x.truncated) for x in text_lie.rollouts)})
            # Impersonation: the attacker signs with its own key a batch claiming honest's id.
            imp = RolloutBatch(**{**_honest_looking_batch(victim, a["impersonation"], r, wrong).__dict__,
                                  "sender": honest.swarm.peer_id})
            payloads = {
                "malformed": _env(a["malformed"], b"\x92\xc1\xff not msgpack"),
                "oversized": b"\0" * (MAX_ENVELOPE_SIZE + 1),
                "bad_signature": bytes(bad_sig),
                "forged_reward": _env(a["forged_reward"], _with_extra_field(good("forged_reward", right), "reward", 1.0)),
                "forged_reward_text": _env(a["forged_reward_text"], encode(text_lie)),
                "forged_ground_truth": _env(a["forged_ground_truth"], _with_extra_field(
                    good("forged_ground_truth", wrong), "ground_truth", wrong)),
                "unknown_task": _env(a["unknown_task"], encode(_honest_looking_batch(
                    victim, a["unknown_task"], r, wrong, task_id="arithmetic:5:9"))),
                "impersonation": _env(a["impersonation"], encode(imp)),
            }
            for name, data in payloads.items():
                hub.put(swarm, r, a[name].peer_id, data, time.time() + 30)
            hub.put(swarm, k2, honest.swarm.peer_id, honest_bytes, time.time() + 30)
            return {n: i.peer_id for n, i in a.items()}

        summaries = await run_all([victim, honest], attack())
        return victim, honest, summaries, seen_groups

    victim, honest, (s_victim, s_honest, attackers), seen = asyncio.run(scenario())
    sw = s_victim["swarm"]
    assert s_victim["steps"] == steps and not s_victim["stopped_early"]  # it kept running
    assert sw["rejected"] == {
        "malformed": 1, "oversized": 1, "bad_signature": 1, "replay": 1, "unknown_field": 2,
        "text_mismatch": 1, "bad_task": 1, "sender_mismatch": 1}, sw["rejected"]
    assert sw["rejected_total"] == 9
    # Only the honest peer's groups were ever admitted or trained on...
    assert set(sw["groups_used_by_peer"]) == {honest.swarm.peer_id}
    assert set(victim.swarm.stats.groups_in) == {honest.swarm.peer_id}
    external = [g for g in seen if "/" in g]
    assert external and all(g.startswith(honest.swarm.peer_id + "/") for g in external)
    assert not any(any(g.startswith(pid) for pid in attackers.values()) for g in seen)
    # ...and the rejections are visible in the status file and the last metrics record.
    import json
    status = json.loads((victim.run_dir / "status.json").read_text())
    assert status["swarm"]["rejected_total"] == 9
    last = json.loads((victim.run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["rejected_total"] == 9 and last["rejected"]["replay"] == 1
