"""The bounds on what a peer's messages can make this node read, check or remember: groups a batch,
text bytes a token, clock drift of a message's own timestamp, peers tracked, and the largest
envelope worth fetching, and how many envelopes a round. The pool's own bounds (groups, bytes, a sender's share) are
node/swarm/pool.py's.
"""

from __future__ import annotations

import math

from swarm_node.protocol.messages import MAX_ROLLOUTS, MAX_TASK_ID_CHARS
from swarm_node.protocol.signing import MAX_ENVELOPE_SIZE

__all__ = ["MAX_GROUPS_PER_BATCH", "MAX_TEXT_BYTES_PER_TOKEN", "MAX_CREATED_DRIFT_S", "MAX_TRACKED_PEERS",
           "OTHER_PEERS", "envelopes_wanted", "usable_envelope_bytes", "envelope_ttl", "heartbeat_ttl"]

MAX_GROUPS_PER_BATCH = 64  # tasks in one peer batch (an honest node publishes prompts_per_step - J)
# A completion's text bytes per token, from above (the longest tokens of common vocabularies are
# runs of spaces or repeated punctuation, 16-32 bytes): bounds text whose tokens this node cannot count.
MAX_TEXT_BYTES_PER_TOKEN = 32
MAX_CREATED_DRIFT_S = 5.0  # a message's created_at vs its signed (clock-checked) envelope time
MAX_TRACKED_PEERS = 1024  # per-peer counters and heartbeats kept; the rest are summed under "(other)"
OTHER_PEERS = "(other)"


FETCH_MARGIN = 2.0  # envelopes worth fetching a round, in multiples of what J needs
MIN_ENVELOPES = 2


def envelopes_wanted(external_groups: int, groups_per_envelope: float) -> int:
    """Envelopes a round worth fetching: J groups' worth with a margin (0 when J is 0). The
    exchange's rule; a carrier that pays per fetch is handed the number (``Transport.poll``)."""
    if external_groups <= 0:
        return 0
    return max(MIN_ENVELOPES, math.ceil(FETCH_MARGIN * external_groups / max(groups_per_envelope, 1.0)))


def envelope_ttl(max_round_lag: int, round_seconds: float) -> float:
    """How long a published round's envelope stays up: the rounds a reader may lag, plus two."""
    return (max_round_lag + 2) * round_seconds


def heartbeat_ttl(round_seconds: float) -> float:
    """How long a heartbeat stays up, and how old a peer's may be and still count it alive."""
    return 3 * round_seconds


def usable_envelope_bytes(max_tokens: int | None, records: int = MAX_ROLLOUTS) -> int:
    """The encoded size, from above, of the largest envelope whose every completion this node
    could train on: ``records`` (a batch holds at most MAX_ROLLOUTS) of ``max_tokens`` tokens
    (5 bytes an id, 9 a float64 log-prob, MAX_TEXT_BYTES_PER_TOKEN of text), each with its task
    id. Not this node's group size: a sender with bigger groups is honest, and the first
    ``group_cap`` of each are usable. A body declared larger must hold completions longer than
    this node trains on, so it is not fetched: what a hostile sender's big batch costs a receiver
    is an index entry, not 4 MiB of decoding. (A sender with another, finer tokenizer may need
    more ids than ``max_tokens`` for a text this node could use: such a batch near the bound is
    refused.) None: no limit but the message size. tests/node/swarm/test_exchange.py checks the bound
    against real encodings."""
    if max_tokens is None:
        return MAX_ENVELOPE_SIZE
    record = 160 + MAX_TASK_ID_CHARS + max_tokens * (5 + 9 + MAX_TEXT_BYTES_PER_TOKEN)
    return min(MAX_ENVELOPE_SIZE, 2048 + min(records, MAX_ROLLOUTS) * record)
