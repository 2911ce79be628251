"""Fetching peers' envelope bodies for a hivemind reader: which of a round's index entries to
fetch, the downloads in the background, and what each outcome means for its publisher and host.

The transport reads the index shards (node/transport/hivemind/transport.py ``poll``) and hands
each round's entries here. An entry is skipped when it is ours, malformed, of a publisher or host
struck for a bad body (node/transport/hivemind/strikes.py), already judged or being fetched,
pointing at a host that said it serves someone else (``misdirected``), or announcing more than
the node could use (``oversized``). Of the rest, about what the node will use is fetched
(node/transport/hivemind/fetch_budget.py, ``choose_fetches``): publishers with a verified
history first (``known``: vouched by the rule every carrier follows, node/transport/standing.py:
envelopes admitted in 3 of the receiver's rounds, ``admitted``). A body that arrives
with the size and sha256 its owner-signed entry announced is ready for the next poll; one that
does not strikes its publisher and the host that served it.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import random
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from hivemind.p2p import PeerID

from swarm_node.node.transport.base import Delivery
from swarm_node.node.transport.hivemind.fetch_budget import MAX_FETCH_FAILURES, FetchBudget
from swarm_node.node.transport.hivemind.index import bulky_threshold, choose_fetches
from swarm_node.node.transport.hivemind.nat import dial_failure_hint
from swarm_node.node.transport.hivemind.rollout_stream import FETCH_TIMEOUT_S, NotAnnounced, Oversized
from swarm_node.node.transport.hivemind.serve_slots import PER_PEER
from swarm_node.node.transport.hivemind.served_hosts import ServedHosts
from swarm_node.node.transport.hivemind.strikes import SourceStrikes
from swarm_node.node.transport.standing import Standing

log = logging.getLogger("swarm_node.node.transport.hivemind.transport")  # the transport's log name, as before the split

__all__ = ["Fetcher", "Download", "MAX_INFLIGHT_FETCHES", "REST_ROUNDS"]

MAX_INFLIGHT_FETCHES = 16  # bodies downloading at once (x 4 MiB at most each)
# A known publisher whose body could not be downloaded is not fetched for this many rounds; it
# keeps its standing: a host too busy to serve (or kept busy by someone else) is no evidence
# against its publisher, and forgetting it let any peer that could fill the host's serve slots
# wipe a long verified history.
REST_ROUNDS = 3

# download(libp2p peer, round, publisher, declared size) -> the body
Download = Callable[[PeerID, int, str, int], Awaitable[bytes]]


def valid_index(record: object) -> bool:
    """Whether an index entry's value has what a fetch needs (the validators checked the rest)."""
    return (isinstance(record, dict) and isinstance(record.get("p2p"), str)
            and isinstance(record.get("size"), int) and isinstance(record.get("sha256"), str)
            and len(record["sha256"]) == 64)


@dataclass
class Fetcher:
    me: str  # our publisher id: our own entries are not fetched
    rejected: collections.Counter  # the transport's refusals, counted here too
    standing: Standing = field(default_factory=Standing)  # who has a verified history (bounded)
    budget: FetchBudget = field(default_factory=FetchBudget)
    strikes: SourceStrikes = field(default_factory=SourceStrikes)
    served: ServedHosts = field(default_factory=ServedHosts)  # hosts that served a publisher's matching body
    inflight: dict = field(default_factory=dict)  # (round, publisher, sha) -> (task, its host)
    resting: dict = field(default_factory=dict)  # known publisher given up on -> last round skipped
    ready: list = field(default_factory=list)  # fetched, not yet returned
    body_sizes: collections.deque = field(default_factory=lambda: collections.deque(maxlen=64))  # fetched lately
    fetch_failures: int = 0  # bodies given up on (peer gone, cut off)
    misdirected: int = 0  # entries pointing at a host that serves another publisher
    backed_off: int = 0  # back-offs of publishers whose bodies failed
    body_bytes: int = 0  # envelope bodies downloaded
    undialable: int = 0  # fetches that found no address of the host to dial (NAT: node/transport/hivemind/nat.py)

    @property
    def known(self) -> dict:
        """Publishers with a verified history (vouched), fetched before unknown keys."""
        return self.standing.vouched

    def forget_before(self, oldest: int) -> None:
        self.budget.forget_before(oldest)
        self.strikes.forget_before(oldest)
        self.resting = {p: u for p, u in self.resting.items() if u >= oldest}

    def start_round(self, r: int, entries: dict[str, dict], want: int | None, size_limit: int, rng: random.Random,
                    reachable: Callable[[], set[str]], download: Download) -> list[asyncio.Task]:
        """Start fetching what is worth it of round ``r``'s ``entries`` (publisher -> index entry
        value); ``want`` None: all of them. Returns the tasks started."""
        tried = self.budget.reading(r).tried
        fresh = {p: rec for p, rec in entries.items() if self._worth_fetching(r, p, rec, size_limit, tried)}
        if want is None:
            picks = list(fresh)
            random.shuffle(picks)
        else:
            limit = bulky_threshold(self.body_sizes)
            known_slots, explore_slots = self.budget.slots(r, want, len(self.known))
            picks = choose_fetches(list(fresh), self.known, known_slots, explore_slots, rng,
                                   bulky={p for p, rec in fresh.items() if rec["size"] > limit},
                                   hosts={p: rec["p2p"] for p, rec in fresh.items()}, reachable=reachable(),
                                   promising=self.standing.candidates.keys())
        started = []
        for publisher in picks:
            record = fresh[publisher]
            if len(self.inflight) >= MAX_INFLIGHT_FETCHES:
                break  # bounded memory; the rest is fetched by later polls
            if self.from_host(record["p2p"]) >= PER_PEER:
                continue  # a host serves one peer PER_PEER streams at once: the rest wait for a later poll
            known = publisher in self.known
            self.budget.spend(r, publisher, known)
            task = asyncio.create_task(self._fetch(r, publisher, record, known or want is None, download))
            self.inflight[(r, publisher, record["sha256"])] = (task, record["p2p"])
            started.append(task)
        return started

    def take_ready(self) -> list[Delivery]:
        ready, self.ready = self.ready, []
        return ready

    def from_host(self, host: str) -> int:
        """Our downloads from ``host`` in flight (at most MAX_INFLIGHT_FETCHES to count)."""
        return sum(h == host for _, h in self.inflight.values())

    def cancel(self) -> None:
        """Stop every download (closing or restarting: not the publishers' doing)."""
        for task, _ in list(self.inflight.values()):
            task.cancel()
        self.inflight.clear()

    def _worth_fetching(self, r: int, publisher: str, record: object, size_limit: int, tried: set[str]) -> bool:
        """Whether an index entry read for round ``r`` is a candidate to fetch now (``tried``: the
        round's publishers tried already); the entries judged useless here are remembered
        (``misdirected``, ``oversized``)."""
        if publisher == self.me or not valid_index(record):
            return False
        if self.strikes.skips(publisher, record["p2p"], r):
            return False  # its (or its host's) last body failed verification: not fetched for a while
        if self.resting.get(publisher, -1) >= r:
            return False  # given up on lately (its host did not serve): tried again after a few rounds
        entry = (publisher, record["sha256"])
        if self.budget.is_judged(r, entry) or (r, *entry) in self.inflight or publisher in tried:
            return False
        if self.strikes.misdirected(publisher, record["p2p"]):  # that host said it serves someone else
            self.budget.judge(r, entry)
            self.misdirected += 1
            return False
        if record["size"] > size_limit:  # more than the node could use: not fetched
            self.budget.judge(r, entry)
            self.rejected["oversized"] += 1
            return False
        return True

    async def _fetch(self, round: int, publisher: str, record: dict, retry: bool, download: Download) -> None:
        """Download one body in the background; a verified-size, hash-matching one goes to
        ``ready`` for the next poll to return. A failed fetch of a publisher with a verified
        history (``retry``) gives its slot back and is retried; an unknown one's is not."""
        entry = (publisher, record["sha256"])
        ok = False
        try:
            data = await asyncio.wait_for(
                download(PeerID.from_base58(record["p2p"]), round, publisher, record["size"]), FETCH_TIMEOUT_S)
            ok = True
        except (Oversized, NotAnnounced) as e:
            self.budget.judge(round, entry)
            self.rejected["oversized" if isinstance(e, Oversized) else "hash_mismatch"] += 1
            self.back_off(publisher, round, host=record["p2p"])
            return
        except asyncio.CancelledError:
            ok = None  # closing or restarting: not the publisher's doing
            raise
        except Exception as e:  # noqa: BLE001 - a peer that vanished mid-transfer is routine
            n = self.budget.failed(round, entry)
            hint = dial_failure_hint(e)
            if hint is not None:
                self.undialable += 1
                if self.undialable == 1:  # once: the same cause fails every fetch from that host
                    log.warning("could not fetch the rollouts of %s from its host %s: %s", publisher, record["p2p"],
                                hint)
            log.debug("fetching round %d from %s failed (%d/%d): %s: %s", round, publisher, n,
                      MAX_FETCH_FAILURES, type(e).__name__, e)
            return
        finally:
            self.inflight.pop((round, *entry), None)
            if ok is False:
                self._fetch_failed(round, publisher, entry, retry)
        self.budget.judge(round, entry)
        self.body_bytes += len(data)
        self.body_sizes.append(len(data))
        if hashlib.sha256(data).hexdigest() != record["sha256"]:
            self.rejected["hash_mismatch"] += 1
            self.back_off(publisher, round, host=record["p2p"])
            return
        self.strikes.served_by[(round, publisher)] = record["p2p"]  # the host the node's verdict is about
        self.served.note(publisher, record["p2p"])  # its own host: the peer cache keeps only such addresses
        self.ready.append(Delivery(round, publisher, data))

    def _fetch_failed(self, round: int, publisher: str, entry: tuple[str, str], retry: bool) -> None:
        """A fetch that brought nothing usable (the fetch budget decides whether it is tried
        again). Given up, a known publisher is not fetched for ``REST_ROUNDS`` rounds but keeps its
        standing (a host that did not serve may be overloaded, or kept busy by someone else: no
        evidence against the publisher); an unknown key is backed off at once (junk entries cost
        their sender, not the reader's next rounds)."""
        counted = self.budget.fetch_failed(round, publisher, entry, retry, publisher in self.known)
        if counted is None:
            return
        self.fetch_failures += counted
        if publisher in self.known:
            self.resting[publisher] = round + REST_ROUNDS
        elif not retry:
            self.back_off(publisher, round)

    def admitted(self, publisher: str, round: int, now: int) -> None:
        """The node admitted an envelope of ``publisher`` for ``round`` in its own round ``now``:
        its strikes, and its hosts', end; it counts toward a verified history (fetched before
        unknown keys), which one envelope does not buy (keys are free: node/transport/standing.py)."""
        self.strikes.vouch(publisher)
        self.standing.admitted(publisher, round, now)

    def distrust(self, publisher: str, round: int) -> None:
        # The body is what the publisher's owner-signed entry announced (sha256), so a refusal of
        # it is the publisher's own doing: nobody can get an honest key backed off this way. Its
        # host served it, and an honest host serves only its own publisher's: the host goes too.
        self.back_off(publisher, round, host=self.strikes.served_by.get((round, publisher)))

    def back_off(self, publisher: str, round: int, host: str | None = None) -> None:
        """Skip a publisher whose body failed verification, and ``host``, the libp2p peer that
        served it, for the next rounds; it loses its verified history."""
        self.strikes.strike(publisher, round, host)
        self.standing.forget(publisher)
        self.backed_off += 1
