"""Where the swarm's index lives in the DHT, and which of its entries a node reads and fetches.

The index is what lets a node find peers' rollouts: one small owner-signed entry per publisher
and round (``{p2p, size, sha256}``), and one heartbeat per publisher. One DHT key for all of them
would grow with the swarm: every read returns every entry, and near ten thousand peers one reply
outgrows hivemind's 2 MiB limit. So the index is **sharded on a ladder of levels**::

    level 0   1 shard      swarm-node/<swarm>/rollouts/<round>/           (and .../peers/)
    level 1   16 shards    swarm-node/<swarm>/rollouts/<round>/<h[:1]>
    level 2   256 shards   swarm-node/<swarm>/rollouts/<round>/<h[:2]>
    level 3   4096 shards  swarm-node/<swarm>/rollouts/<round>/<h[:3]>    h = sha256(peer id), hex

A peer's shard at each level is fixed by its id (the record validator refuses an entry in
another shard, so nobody can pile entries into one), and the level is chosen from the swarm's
size as each node estimates it: the level whose shards hold about ``SHARD_TARGET`` entries.
Nodes agree without a coordinator because they never need the same estimate: a writer stores
its entry at the levels for half, once and twice its estimate (one or two stores), and a reader
reads its own level, so any two nodes whose estimates are within a factor of two meet. A reader
also reads one shard of each level above on a round's first read and whenever a read found too
few, which is how a newcomer that starts believing it is alone finds a big swarm in one read. Reading one shard
returns at most ~2 x SHARD_TARGET entries at any N.

The size is estimated from the shards a reader chose at random only (``ReadPlan.sampled``), each
counted up to MAX_SHARD_COUNT entries (``estimate_size``). Keys can be ground into a chosen shard
(about 16**level key generations each): a reader that counted the shard of a peer it follows
(the one a Sybil floods) would believe in a swarm of thousands and read levels that peer never
writes, and lose it. Nodes whose estimates still differ find each other through
``search_levels``: a known publisher missing from its shard in a round before the newest is
looked for at every level, lower first, a few publishers a round (node/transport/hivemind/known_shards.py).

A node then fetches only what it will use (``choose_fetches``): about J groups' worth of
envelopes a round, publishers it has admitted before first (a verified history), and at most
one unknown one every EXPLORE_EVERY_ROUNDS rounds on top (``explore_allowance``: all of them
while it knows too few), so a flood of fresh keys costs a reader half a fetch a round, never
the slots of the peers it knows, while a new honest peer is still found.

Everything here is pure (no I/O) so the arithmetic can be tested by hand.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass
from typing import Collection, Iterable, Mapping, Sequence, Set

from swarm_node.protocol.identity import PEER_ID_RE

__all__ = ["SHARD_FANOUT", "MAX_LEVEL", "SHARD_TARGET", "EXPLORE_EVERY_ROUNDS", "FOLLOWER_LEVEL", "peer_hash",
           "shard_prefix", "level_for", "write_levels", "round_key", "peers_key", "weights_key", "followers_key",
           "parse_key", "ParsedKey", "ReadPlan", "read_plan", "search_levels", "MAX_SHARD_COUNT", "estimate_size", "choose_fetches", "favoured", "explore_order", "explore_allowance", "bulky_threshold"]

SHARD_FANOUT = 16  # one hex digit of the peer-id hash per level
MAX_LEVEL = 3  # 4096 shards: ~64 entries a shard at a quarter of a million peers
SHARD_TARGET = 32  # entries a reader aims to find in one shard (~10 KB of signed entries)
MAX_SHARD_COUNT = 2 * SHARD_TARGET  # the most one shard read counts for in the size estimate
EXPLORE_EVERY_ROUNDS = 2  # a node that knows enough peers tries one unknown publisher this often
BULKY_FACTOR = 4.0  # an entry this many times the usual body size is fetched after the others
_PREFIX_RE = re.compile(r"[0-9a-f]{0,%d}" % MAX_LEVEL)
_ROUND_RE = re.compile(r"[0-9]{1,18}")  # ASCII digits only: str.isdigit() takes "²", which int() refuses


def peer_hash(peer_id: str) -> str:
    return hashlib.sha256(peer_id.encode()).hexdigest()


def shard_prefix(peer_id: str, level: int) -> str:
    return peer_hash(peer_id)[:level]


def level_for(n: float) -> int:
    """The smallest level whose shards hold at most SHARD_TARGET of ``n`` peers' entries."""
    level = 0
    while level < MAX_LEVEL and n / SHARD_FANOUT ** level > SHARD_TARGET:
        level += 1
    return level


def write_levels(n: float) -> list[int]:
    """Where a writer that believes the swarm has ``n`` peers stores its entry: every reader whose
    estimate is within a factor of two of ``n`` reads one of these levels."""
    return sorted({level_for(n / 2), level_for(n), level_for(2 * n)})


def round_key(swarm: str, round: int, prefix: str) -> str:
    return f"swarm-node/{swarm}/rollouts/{round}/{prefix}"


def peers_key(swarm: str, prefix: str) -> str:
    return f"swarm-node/{swarm}/peers/{prefix}"


FOLLOWER_LEVEL = 1  # a source's followers announce on 16 shards (at most MAX_RELAYS are relays)


def weights_key(swarm: str, source: str) -> str:
    """Where a weight source's newest version is announced, under its own subkey only
    (node/transport/hivemind/directory.py): no flood of followers can grow this record."""
    return f"swarm-node/{swarm}/weights/{source}"


def followers_key(swarm: str, source: str, prefix: str) -> str:
    """One shard of a source's follower announcements: each follower's at ``shard_prefix(its id,
    FOLLOWER_LEVEL)``."""
    return f"swarm-node/{swarm}/weights/{source}/{prefix}"


@dataclass(frozen=True)
class ParsedKey:
    swarm: str
    kind: str  # "rollouts" | "peers" | "weights" | "followers"
    round: int | None
    prefix: str
    source: str | None = None  # a weights key's source peer id


def parse_key(raw: str) -> ParsedKey | None:
    """The parts of one of our index keys, or None if ``raw`` is not one."""
    if not isinstance(raw, str) or len(raw) > 256 or not raw.startswith("swarm-node/"):
        return None
    parts = raw.split("/")
    if len(parts) == 4 and parts[2] == "peers":
        swarm, kind, round, prefix = parts[1], "peers", None, parts[3]
    elif len(parts) == 5 and parts[2] == "rollouts" and _ROUND_RE.fullmatch(parts[3]):
        swarm, kind, round, prefix = parts[1], "rollouts", int(parts[3]), parts[4]
    elif len(parts) == 4 and parts[2] == "weights" and PEER_ID_RE.fullmatch(parts[3]):
        return ParsedKey(parts[1], "weights", None, "", parts[3]) if parts[1] else None
    elif (len(parts) == 5 and parts[2] == "weights" and PEER_ID_RE.fullmatch(parts[3])
          and len(parts[4]) == FOLLOWER_LEVEL and _PREFIX_RE.fullmatch(parts[4])):
        return ParsedKey(parts[1], "followers", None, parts[4], parts[3]) if parts[1] else None
    else:
        return None
    if not swarm or not _PREFIX_RE.fullmatch(prefix):
        return None
    return ParsedKey(swarm, kind, round, prefix)


@dataclass(frozen=True)
class ReadPlan:
    """The shards to read for one round: ``favoured`` ones (where publishers with a verified
    history were last found: read to find them, so never counted in the swarm-size estimate, for
    a shard is favoured because someone is in it) and ``sampled`` ones (chosen at random at the
    reader's level, and the probes of the levels above: the estimate's sample)."""

    favoured: list[str]
    sampled: list[str]

    @property
    def prefixes(self) -> list[str]:
        return self.favoured + [p for p in self.sampled if p not in self.favoured]


def read_plan(n_estimate: float, wanted: int, rng: random.Random, probe_up: bool = False,
              favour: Sequence[str] = (), elsewhere: Mapping[str, Sequence[int]] | None = None) -> ReadPlan:
    """The shards to read for one round, at the reader's level: the shards of the ``favour``ed
    publishers (those with a verified history the reader wants to fetch: in a big swarm they are
    spread over thousands of shards, so a random read would rarely meet them), at the levels
    ``elsewhere`` names for one (where it was last found, or every level while it is missing:
    node/transport/hivemind/known_shards.py) or else the reader's own; then random shards
    (newcomers, and everyone while the reader knows no one) until it expects ``2 x wanted``
    entries in all (at most SHARD_FANOUT shards, always at least one); plus one shard of each
    level above when ``probe_up`` (a round's first read, or the last read found too few: the
    swarm may be bigger than believed, and a level only some writers use under-counts)."""
    level = level_for(n_estimate)
    elsewhere = elsewhere or {}
    favoured = list(dict.fromkeys(shard_prefix(p, lv) for p in favour[:wanted]
                                  for lv in elsewhere.get(p, (level,))))
    if level == 0:
        sampled = [""]
    else:
        own = [p for p in favoured if len(p) == level]
        per_shard = max(n_estimate / SHARD_FANOUT ** level, 1.0)
        k = min(SHARD_FANOUT, max(1, math.ceil(2 * wanted / per_shard)))
        explore = max(1, k - len(own))  # always one random shard: newcomers must be found
        # Random among the shards not favoured: the sample the estimate counts is one nobody chose.
        pool = [format(p, "x").zfill(level) for p in range(SHARD_FANOUT ** level)] if level == 1 else None
        if pool is not None:  # 16 shards: sample among those not chosen yet
            others = [p for p in pool if p not in own]
            sampled = rng.sample(others, min(explore, len(others)))
        else:
            sampled = [p for p in _random_prefixes(level, explore + len(own), rng) if p not in own][:explore]
    if probe_up:  # one shard of every level above: empty ones cost a key, not bytes
        for up in range(level + 1, MAX_LEVEL + 1):
            sampled += _random_prefixes(up, 1, rng)
    return ReadPlan(favoured, sampled)


def search_levels(level: int) -> list[int]:
    """Where to look for a known publisher that its shard at ``level`` no longer holds: every
    other level, the ones below first (nearest first: a writer whose estimate is lower than the
    reader's writes lower), then those above."""
    return list(range(level - 1, -1, -1)) + list(range(level + 1, MAX_LEVEL + 1))


def _random_prefixes(level: int, k: int, rng: random.Random) -> list[str]:
    if level == 0:
        return [""]
    picks = rng.sample(range(SHARD_FANOUT ** level), min(k, SHARD_FANOUT ** level))
    return [format(p, "x").zfill(level) for p in picks]


def estimate_size(reads: Iterable[tuple[int, int]], min_found: int = 3) -> float | None:
    """The swarm's size from shards read at random: ``reads`` = (level, entries found) per shard.
    Each level's shards stand for SHARD_FANOUT**level of theirs. One shard counts for at most
    MAX_SHARD_COUNT entries, what an honest shard of a level its writers use can hold (a writer
    leaves a level once its estimate puts more than that in a shard): keys ground into one shard
    move the estimate no further than one full honest shard. A level only some writers use
    (their estimates differ) can only under-count, so the largest estimate wins, among levels
    that found at least ``min_found`` entries (fewer is noise); else the level that found most.
    None when nothing was found."""
    by_level: dict[int, list[int]] = {}
    for level, n in reads:
        by_level.setdefault(level, []).append(min(n, MAX_SHARD_COUNT))
    est = {level: sum(c) / len(c) * SHARD_FANOUT ** level for level, c in by_level.items() if sum(c) > 0}
    if not est:
        return None
    solid = [est[level] for level, c in by_level.items() if sum(c) >= min_found]
    if solid:
        return max(solid)
    return est[max(est, key=lambda level: sum(by_level[level]))]


def explore_allowance(round: int, known: int, want: int) -> int:
    """Fetches of unknown publishers a round may spend, on top of ``want`` known ones: while a
    node knows fewer than ``want`` publishers (a newcomer), ``want`` (unknown is all there is);
    after that one every EXPLORE_EVERY_ROUNDS rounds, so newcomers are still found while keys
    made by the thousand cost a reader half a fetch a round."""
    if want <= 0:
        return 0
    if known < want:
        return want
    return 1 if round % EXPLORE_EVERY_ROUNDS == 0 else 0


def choose_fetches(candidates: Sequence[str], known: set[str] | dict, slots: int, explore: int,
                   rng: random.Random, bulky: set[str] | frozenset = frozenset(),
                   hosts: Mapping[str, str] | None = None, reachable: Set[str] = frozenset(),
                   promising: Set[str] = frozenset()) -> list[str]:
    """Which of a round's new publishers to fetch now: up to ``slots`` with a verified history
    (random among them, so every known peer gets its turn), and up to ``explore`` unknown ones
    on top, in ``explore_order``. The two budgets are separate, so junk entries (unknown keys)
    can never use up the slots of the peers a node knows. ``bulky`` publishers (entries
    announcing far more bytes than the envelopes a node usually fetches) come last among the
    known: valid but huge batches from a few keys must not take the slots of peers whose
    envelopes cost a few KB. Among the unknown, the ``promising`` (admitted in an earlier round,
    on their way to a verified history: node/transport/standing.py) come first: standing takes
    admissions in 3 rounds, and a flood of fresh keys drawn alongside would otherwise make an
    honest newcomer wait 3 times as many lucky draws (measured: honest peers got 76% of a clean
    run's rollouts under a 200-keys-a-round flood, tests/node/sim/test_attack_suite.py). Fresh keys
    whose bodies never arrive never become promising."""
    known_c = [p for p in candidates if p in known]
    unknown = [p for p in candidates if p not in known]
    rng.shuffle(known_c)
    known_c.sort(key=lambda p: p in bulky)  # stable: random within each kind
    hosts = hosts or {}
    first = [p for p in unknown if p in promising]
    order = explore_order(first, hosts, reachable, rng) + explore_order(
        [p for p in unknown if p not in promising], hosts, reachable, rng)
    return known_c[:max(slots, 0)] + order[:max(explore, 0)]


def favoured(search: Sequence[str], known: Collection[str], promising: Collection[str], wanted: int,
             rng: random.Random) -> list[str]:
    """The publishers whose shards a read looks at on purpose (``read_plan``'s ``favour``): those
    searched for this time, then known ones at random, then the ``promising`` (admitted before,
    not vouched yet) to fill ``wanted``. Without the promising, a newcomer's peers were read only
    by luck until vouched (3 rounds): a reader whose estimate a flood of fresh keys had raised
    read random shards of a level they were not at, and the honest swarm lost a quarter of its
    rollouts (tests/node/sim/test_attack_suite.py, the flood)."""
    out = list(search)
    for pool in (known, promising):
        rest = [p for p in pool if p not in out and p not in search]
        out += rng.sample(rest, max(min(wanted - len(out), len(rest)), 0))
    return out


def explore_order(publishers: Sequence[str], hosts: Mapping[str, str], reachable: Set[str],
                  rng: random.Random) -> list[str]:
    """The order to try publishers nobody has verified yet, so a newcomer finds honest peers in a
    flood of fresh keys. Keys are free, hosts that answer are not: candidates are taken one per
    host (``hosts``: the libp2p peer an entry points at; an honest host serves only its own
    publisher), hosts this node has a live DHT route to (``reachable``) first (entries pointing
    at hosts that do not exist cost a 10 s timeout each), random among equals. Every candidate
    appears once: the second of each host after the first of all.

    No preference for keys seen longer: it made a node explore the keys of the shards it had
    read first, which clustered the peers it came to know and biased its swarm-size estimate low
    (scripts/bench_index_scale.py: 3.4-3.6x the J groups read and fetched, against 2.7x)."""
    by_host: dict[str, list[str]] = {}
    for p in rng.sample(list(publishers), len(publishers)):
        by_host.setdefault(hosts.get(p, p), []).append(p)
    order = sorted(by_host, key=lambda h: h not in reachable)  # stable: random within each kind
    out = []
    for i in range(max((len(ps) for ps in by_host.values()), default=0)):
        out += [by_host[h][i] for h in order if i < len(by_host[h])]
    return out


def bulky_threshold(recent_sizes: Sequence[int], factor: float = BULKY_FACTOR) -> float:
    """Entries announcing more than ``factor`` x the median of the bodies fetched lately are bulky
    (inf until there is a history)."""
    if len(recent_sizes) < 4:
        return float("inf")
    ordered = sorted(recent_sizes)
    return factor * ordered[len(ordered) // 2]
