"""A malicious peer for simulations: it joins a swarm and, every round, publishes hostile messages.

``swarm-node adversary`` (used by ``swarm-node sim`` for a ``[[malicious]]`` fault) joins like a
node, with its own identity, and cycles through the attacks below, one per round (``--attacks``;
``all`` is every one of them). Honest nodes must refuse each and count it where the table says,
and never train on it; the simulator's summary checks that nothing the adversary sent under its
own id was trained on. The attacks marked *admitted by design* pass admission (a peer may send
them honestly); the table says what they must not do instead, and their groups are trained on.
``scripts/bench_attacks.py`` runs each attack against an honest swarm and compares what the
honest nodes measured with a run without it (docs/results/attacks.md).

    registry.py          the attacks by name (``ATTACKS``, the families) and the function of each
    peer.py              Adversary: its state, what it learns of the honest peers, status, round loop
    main.py              ``run_adversary``: the ``swarm-node adversary`` entry point
    forge.py             Forger: batches, records and signed envelopes, before the lie
    attacks_envelope.py  garbage ... replay: the envelope attacks every node must refuse
    attacks_records.py   logprob_1e300, logprob_1e4, special_tokens, future_created_at
    attacks_admitted.py  foreign_logprob_gap, zero_advantage, crafted_informative: admitted by design
    attacks_dht.py       displace, far_expiry: DHT writes around the index's rules
    attacks_sybil.py     flood, honest_address, oversized: many fresh keys a round
    attacks_unusable.py  unknown_family, unknown_family_flood, shard_flood: what no node can use,
                         and keys ground into one peer's index shard
    client.py            RawClient: a plain hivemind DHT client with no validator
    sybil.py             SybilNode: one DHT node signing for many keys and serving their bodies
    dht_entries.py       index entries and heartbeats at the transport's shard keys

Envelope attacks, signed by the adversary's own key and published under its own index entry::

    garbage          random bytes instead of an envelope             malformed_envelope
    bad_signature    a well-formed batch whose signature is broken    bad_signature
    forged_reward    a batch whose records carry a "reward" field    unknown_field
    forged_truth     a batch whose records carry a "ground_truth"    unknown_field
    text_mismatch    the right answer as text over other token ids   text_mismatch
    impersonation    a batch signed by the adversary, naming a peer  sender_mismatch
    replay           an honest peer's old envelope again, under that peer's index
                     subkey for the previous round                   replay (memory transport);
                                                                     over hivemind the owner-signed
                                                                     index refuses the write
    logprob_1e300    every token's log-prob is -1e300 (-inf in
                     float32: NaN steps for the learner)             implausible_logprob
    logprob_1e4      every token's log-prob is -1e4                  implausible_logprob
    special_tokens   a <pad> in the middle of each completion        special_tokens
    future_created_at  created_at an hour ahead of the signed time (a batch, then a
                     heartbeat, in turn)                             created_at_mismatch
    foreign_logprob_gap  another tokenizer fingerprint, right and wrong answers, each token
                     claimed at log-prob -100: Σ log μ far below Σ log π
                                                                     admitted by design: the row's
                                                                     weight is capped at 1 + ε_high,
                                                                     so ρ and the LR barely move
    zero_advantage   groups of identical completions (one reward: advantage 0) whose
                     tokens are claimed certain (log μ = 0, so w = π ≪ 1)
                                                                     admitted by design: rows with
                                                                     no gradient do not enter ρ
    crafted_informative  each group alternates the right answer and a wrong one (half right
                     by construction: "informative" to swarm.select = informative)
                                                                     admitted by design: it is taken
                                                                     ahead of uninformative groups,
                                                                     never past its share of J

DHT attacks. Index entries go where the transport writes them (``index_entries``: the writer's
shard at levels 0 and 1, where readers of a swarm of up to ~500 peers read)::

    displace         a raw hivemind client (hivemind.DHTNode, none of this project's classes)
                     stores, under each honest peer's own subkey, index entries for this round
                     and the next and heartbeats, all expiring 30 min ahead (later than the
                     owner's), then reads them back                  refused by every replica
                                                                     (read back: 0 kept)
    far_expiry       a raw client plants plain values (no subkey: they would replace every
                     entry of the key) under the next rounds' keys and the heartbeat keys, and
                     an unsigned peer-id entry, all expiring 3 h ahead; a fresh key plants
                     owner-signed entries expiring 50 min and 3 h ahead
                                                                     refused by every replica,
                                                                     but the 50-min signed entry,
                                                                     which the bootstrap peer keeps
                                                                     (it knows no round length;
                                                                     the nodes refuse it)
    flood            FLOOD_IDENTITIES (200) fresh keys a round, each an owner-signed index
                     entry for the round: half point at libp2p peers that do not exist, half
                     at the adversary, which answers with bytes that fail the sha256
                                                                     hash_mismatch (+ backed_off),
                                                                     fetch_failures
    honest_address   HONEST_ADDRESS_IDENTITIES (20) fresh keys a round, each an owner-signed
                     entry pointing at an honest node's libp2p address
                                                                     refused_requests (the honest
                                                                     node serves only its own body)
    oversized        OVERSIZED_SENDERS (4) keys, each a valid batch a round: 64 tasks x 8
                     completions of ~600 tokens (in vocabulary, no special token, text their
                     decoding), just under the 4 MiB message limit  oversized: larger than all a
                                                                     receiver could use (node/swarm/exchange.py
                                                                     usable_envelope_bytes), so not
                                                                     fetched

Batches of what no node can use, and a shard flood (attacks_unusable.py)::

    unknown_family   a valid batch a round, under the adversary's own key, every group of a
                     task family nobody loaded (another dataset, or another version of one)
                                                                     no rejection: unusable_batches
                                                                     (never pooled); over hivemind
                                                                     unusable_backed_off after 3
                                                                     rounds (node/swarm/unusable.py)
    unknown_family_flood  UNUSABLE_IDENTITIES (16) fresh keys a round, each such a batch served
                     by the Sybil (hivemind)                         unusable_batches, within the
                                                                     fetch budget left by known peers
    shard_flood      SHARD_KEYS (64) keys ground into the first honest peer's index shard, an
                     entry each a round at levels 0-2 pointing at junk (hivemind; a swarm of
                     up to 32 nodes reads level 0 only: there, a 64-key flood)
                                                                     hash_mismatch (+ backed_off)

It trains nothing. Its ``status.json`` counts what it sent, by attack, what the transport
refused to carry (``refused``), DHT stores by attack and outcome (``stores``: ``kept`` or
``refused``), every key whose envelopes can be admitted (``identities``: its own and the
oversized senders') and the groups of admitted-by-design attacks it published per round
(``groups_by_round``).

The DHT attacks write index entries with the transport's own ``index_entry`` and
``heartbeat_entry`` (the index layout's one definition).
"""

# The package's public API (the CLI, the simulator, scripts/bench_attacks.py and the tests use it).
from swarm_node.node.sim.adversary.attacks_sybil import OVERSIZED_TASKS
from swarm_node.node.sim.adversary.dht_entries import index_entries
from swarm_node.node.sim.adversary.main import run_adversary
from swarm_node.node.sim.adversary.peer import Adversary
from swarm_node.node.sim.adversary.registry import ADMITTED_BY_DESIGN, ATTACKS, DEFAULT_ATTACKS, RAW_ATTACKS, SYBIL_ATTACKS
from swarm_node.node.sim.adversary.sybil import SybilNode

__all__ = ["ATTACKS", "DEFAULT_ATTACKS", "ADMITTED_BY_DESIGN", "RAW_ATTACKS", "SYBIL_ATTACKS", "OVERSIZED_TASKS",
           "Adversary", "SybilNode", "run_adversary", "index_entries"]
