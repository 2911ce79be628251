"""The node, ``swarm_node.node``: one folder per concept, lowest layer first (scripts/check_layout.py
holds the order and tests/test_layout.py fails on an import that runs up it).

    errors.py, clock.py, daemon_thread.py   leaves every layer may use: NodeError, the shared round
                                            clock, start-up work a Ctrl-C can abandon
    observe/     metrics, status, the metrics endpoint, live progress, plots, logs
    transport/   how envelopes and weight chunks move: the Transport interface, memory and faulty
                 transports, rate limits; one folder per carrier (hivemind/, libp2p/, mqtt/)
    config/      what a node is told: its config (TOML and flags, strictly checked), the policy it names
    checkpoint/  checkpoints: atomic, retained, verified, restored on resume
    evaluate/    held-out evaluation, during a run and of a saved checkpoint; export
    broadcast/   the peer-assisted pipelined weight broadcast: peer, topology, store, follow
    swarm/       the SAPO exchange: publish, admit, pool, take
    run/         one node's run: the round loop (trainer) and its broadcast role, its start-up and
                 stop, rollouts, preflight
    gpu/         memory profiles and ``--profile auto``
    sim/         the simulated swarm with faults, and the adversary
    cli/         the ``swarm-node`` command (thin; imports torch lazily); doctor/ its pre-join checks

docs/architecture.md draws the layers and follows one rollout through them.
"""
