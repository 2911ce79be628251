"""From a node's configuration to its parts: the learner, the generation backend (and its vLLM
engine), the identity and the swarm exchange over its transport (the policy itself:
node/config/policy_loader.py).

Each builder reads the sections it needs and nothing else; ``TrainingNode.create``
(node/run/startup.py) calls them in order. The learner's hyper-parameters are read by name
(``learner_arguments``): every ``Learner`` and ``LossConfig`` parameter comes from the
``learner`` section field of the same name, or from the one other field ``OTHER_SECTIONS``
names, so a parameter cannot be forgotten on the way.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarm_node.node.clock import RoundClock
from swarm_node.node.errors import ConfigError
from swarm_node.node.observe.status import Phase
from swarm_node.node.config.config import NodeConfig
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.node.swarm.peer_cache import CACHE_FILE, PeerCache
from swarm_node.node.transport import Transport
from swarm_node.node.transport.from_config import transport_from_config
from swarm_node.policies.errors import PolicyError
from swarm_node.policies.learner import Learner
from swarm_node.policies.loss import LossConfig
from swarm_node.policies.policy import Policy
from swarm_node.protocol.identity import load_or_create_identity
from swarm_node.rewards.reserved import held_out_set

if TYPE_CHECKING:
    from swarm_node.policies.vllm_backend import VllmSampler

# The node's log name, as before these builders left trainer.py: log filters select it.
log = logging.getLogger("swarm_node.node.run.trainer")

__all__ = ["learner_arguments", "build_learner", "generation_backend", "start_vllm",
           "identity_path", "build_exchange", "OTHER_SECTIONS", "NODE_ONLY_LEARNER_FIELDS"]

# Learner / LossConfig parameters that are not in the learner section: parameter -> (section, field).
OTHER_SECTIONS: dict[str, tuple[str, str]] = {
    "temperature": ("generation", "temperature"),  # log-probs use the sampling temperature
    "max_completion_length": ("generation", "max_completion_length"),  # dr_grpo's normaliser
}
# Learner-section fields the node applies itself: no Learner or LossConfig parameter takes them.
NODE_ONLY_LEARNER_FIELDS = frozenset({"max_off_policy_steps"})  # the trainer's staleness bound


def learner_parameters() -> tuple[str, ...]:
    """The ``Learner``'s keyword hyper-parameters, the loss config aside."""
    return tuple(name for name, p in inspect.signature(Learner).parameters.items()
                 if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "loss")


def learner_arguments(cfg: NodeConfig) -> dict[str, Any]:
    """``Learner``'s keyword arguments, ``loss`` included, from the node's config by field name.

    A parameter the config does not have is a KeyError here, never a library default taken
    silently (tests/node/config/test_config.py checks the other direction: every field is used)."""
    values = cfg.learner.model_dump()
    values.update({name: getattr(getattr(cfg, section), field)
                   for name, (section, field) in OTHER_SECTIONS.items()})
    values["ess_ref"] = values["ess_ref"] or own_rows(cfg)
    loss = LossConfig(**{f.name: values[f.name] for f in dataclasses.fields(LossConfig)})
    return {**{name: values[name] for name in learner_parameters()}, "loss": loss}


def own_rows(cfg: NodeConfig) -> int:
    """The rows a step of this node's own groups carries: the count rule's reference ESS (a
    sharing node's I groups, a node alone all of its groups), times the group size."""
    own = cfg.local_groups if cfg.swarm.transport != "none" else cfg.generation.prompts_per_step
    return max(1, own) * cfg.generation.num_generations


def build_learner(policy: Policy, cfg: NodeConfig) -> Learner:
    return Learner(policy, **learner_arguments(cfg))


def generation_backend(cfg: NodeConfig) -> str:
    """Who samples: "vllm" or "transformers" (policies/vllm_backend.py decides; a ConfigError
    says why an explicit vllm cannot run)."""
    from swarm_node.policies.vllm_backend import choose_backend

    g = cfg.generation
    try:
        return choose_backend(g.backend, cfg.model.device, top_p=g.top_p, top_k=g.top_k,
                              behaviour_lag=cfg.train.behaviour_lag, max_async=cfg.train.max_async,
                              over_provision=g.over_provision)
    except PolicyError as e:
        raise ConfigError(str(e)) from None


def start_vllm(policy: Policy, cfg: NodeConfig) -> "VllmSampler":
    """The vLLM engine for this run (policies/vllm_backend.py), sized for its longest sequence."""
    from swarm_node.node.run.preflight import longest_prompt
    from swarm_node.policies.vllm_backend import VllmSampler

    g = cfg.generation
    length = longest_prompt(policy.encode_prompts, policy.prompt_of, cfg) + g.max_completion_length + 16
    return VllmSampler(policy, model_path=policy.name, dtype=cfg.model.dtype, max_model_len=length,
                       seed=cfg.train.seed, gpu_memory_utilization=g.vllm_gpu_memory_utilization,
                       cpu_kv_cache_gib=g.vllm_cpu_kv_cache_gib, sleep=g.vllm_sleep)


def identity_path(cfg: NodeConfig) -> Path:
    return Path(cfg.swarm.identity) if cfg.swarm.identity else Path(cfg.run.dir) / "identity.pem"


async def build_exchange(cfg: NodeConfig, policy: Policy, transport: Transport | None = None,
                         phase: Phase | None = None) -> SwarmExchange:
    """This node's identity, transport and exchange, started (joins the swarm); ``phase`` hears
    about join attempts."""
    sc = cfg.swarm
    ident = load_or_create_identity(identity_path(cfg))
    log.info("peer id %s (key %s)", ident.peer_id, identity_path(cfg))
    cache = PeerCache(Path(cfg.run.dir) / CACHE_FILE, ident).load()
    if transport is None:
        transport = transport_from_config(sc, ident, p2p_identity_path=str(identity_path(cfg)) + ".p2p",
                                          on_retry=(lambda d: phase("joining the swarm", d)) if phase else None)
    if hasattr(transport, "fallback_peers"):  # a carrier that joins through bootstraps: the cache after them
        transport.fallback_peers = cache.addrs
    if cfg.faults.active:
        from swarm_node.node.transport.faulty import FaultyTransport

        f = cfg.faults
        transport = FaultyTransport(swarm=sc.name, publisher=ident.peer_id, inner=transport,
                                    delay_seconds=f.delay_seconds, jitter_seconds=f.jitter_seconds,
                                    blocked_peers=frozenset(f.blocked_peers), blocked_from=f.blocked_from,
                                    blocked_until=f.blocked_until, seed=cfg.train.seed)
        log.warning("fault injection on: %s", f.model_dump())
    embeddings = policy.model.get_input_embeddings().num_embeddings
    tok = policy.tokenizer
    exchange = SwarmExchange(
        transport, ident, RoundClock(sc.round_seconds),
        tokenizer_fingerprint=policy.rollout_fingerprint,
        model_fingerprint=policy.model_fingerprint, vocab_size=min(len(tok), embeddings),
        decode_text=lambda ids: tok.decode(list(ids), skip_special_tokens=True),
        group_cap=cfg.group_size, max_round_lag=sc.max_round_lag, poll_seconds=sc.poll_seconds,
        max_clock_skew=sc.max_clock_skew, seed=cfg.train.seed, external_groups=sc.external_groups,
        max_sender_share=sc.max_sender_share, special_ids=frozenset(tok.all_special_ids), eos_id=tok.eos_token_id,
        max_tokens=cfg.generation.max_completion_length, select=sc.select,
        reward_cfg=cfg.tasks.reward_config(policy.prompt_format.kind),
        held_out=held_out_set(cfg.tasks.names, cfg.tasks.difficulties, cfg.eval.tasks_per_family).holds)
    await exchange.start()
    via = getattr(transport, "found_via", "")
    log.info("joined swarm %r over %s as %s%s", sc.name, type(transport).__name__, ident.peer_id,
             f" (through its {via})" if via.startswith("peer cache") else "")
    exchange.peer_cache = cache  # kept up to date by node/swarm/peer_cache.py's keep_peer_cache
    return exchange
