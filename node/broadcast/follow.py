"""The broadcast from a node's side: a source that publishes its policy's versions, and a follower
that keeps a policy at the source's newest version, within a staleness bound.

``WeightSource.publish`` encodes the policy's trained state (policies/weight_state.py), orders the
announced followers into the manifest's relays (node/transport/hivemind/directory.py: the ones it vouches
for first), signs and offers it (node/broadcast/peer.py), and writes its pointer to the DHT.
``WeightFollower.run`` announces the follower every few seconds, reads the newest version from the
source's pointer and the addresses of the peers it exchanges with (its upstream and children)
from their shards, asks for a manifest it has missed, and applies each complete version to its
policy atomically (``apply_state`` under the policy's weights lock, in a worker thread). The last
good version stays when a version fails to apply.

Staleness: ``newest_seen`` is the newest version announced by the source (pointer) or held;
``lag = newest_seen - applied``; a worker may publish rollouts only while ``lag <= max_staleness``
(``fresh_enough``: prime-rl's default bound is 2; ECHO-2 stayed stable to about 6), and, once
restarted with its saved version, only after it heard the source's pointer or a new version
(until then its saved version's age is unknown: the learner may be far ahead).
"""

from __future__ import annotations

import asyncio
import logging

from swarm_node.node.transport.directory import Directory, relay_order
from swarm_node.node.broadcast.peer import BroadcastPeer
from swarm_node.node.broadcast.store import ChunkStore
from swarm_node.policies.weight_state import apply_state, encode_state
from swarm_node.protocol.manifest import Manifest
from swarm_node.protocol.messages import same_tokenizer

log = logging.getLogger(__name__)

__all__ = ["WeightSource", "WeightFollower", "fresh_enough"]


def fresh_enough(applied: int | None, newest_seen: int | None, max_staleness: int) -> bool:
    """Whether rollouts of version ``applied`` may still be published (None: nothing applied)."""
    if applied is None:
        return False
    return newest_seen is None or newest_seen - applied <= max_staleness


class WeightSource:
    """Publishes a policy's versions. With a ``store``, the last signed manifest is kept on disk
    before it is offered, so a restarted source (resumed from an older checkpoint, say) never
    signs a version number again: its followers would refuse the new weights as old, or worse,
    label rollouts of the old ones with a number that now means others."""

    def __init__(self, policy, peer: BroadcastPeer, directory: Directory, fanout: int = 1,
                 store: ChunkStore | None = None):
        self.policy, self.peer, self.directory, self.fanout = policy, peer, directory, fanout
        self.store = store
        self.version = -1
        self.last: Manifest | None = None

    async def next_free_version(self) -> int:
        """The lowest version this source has not signed, as far as its disk and its DHT pointer
        (a deleted run folder's, while it lives) know."""
        seen = [-1]
        if self.store is not None:
            m = self.store.load_manifest("published")
            if m is not None and m.source == self.peer.me and m.swarm == self.peer.swarm:
                seen.append(m.version)
        try:
            pointer = await self.directory.read_pointer()
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            log.warning("weights directory: %s: %s", type(e).__name__, e)
            pointer = None
        if pointer is not None:
            seen.append(pointer.version)
        self.version = max(self.version, *seen)
        return self.version + 1

    async def publish(self, version: int, step: int, vouched=frozenset()) -> Manifest:
        """Sign and offer ``version``; ``vouched``: followers whose work the caller admitted."""
        if version <= self.version:
            raise ValueError(f"version {version} is not newer than {self.version}, signed before")
        data, fmt = await asyncio.to_thread(encode_state, self.policy)
        followers = await self.directory.read_followers()
        relays = relay_order(followers, version, vouched)
        # Only relays, of this version and those still held: the table is no bigger than two
        # manifests' lists, however many ids announce themselves.
        held = {p for t in self.peer.held.values() for p in t.manifest.relays}
        for peer in [p for p in self.peer.directory if p not in held]:
            del self.peer.directory[peer]
        self.peer.directory.update({p: followers[p][0] for p in relays})
        m = await self.peer.publish(data, version=version, step=step, model_fingerprint=self.policy.model_fingerprint,
                                    tokenizer_fingerprint=self.policy.tokenizer_fingerprint, format=fmt,
                                    relays=relays, fanout=self.fanout,
                                    before_offer=self._record if self.store is not None else None)
        self.version, self.last = version, m
        await self.directory.announce_version(m, self.peer.carrier.address)
        return m

    def _record(self, m: Manifest) -> None:
        self.store.save_manifest("published", m)  # an OSError here stops the publish: nothing offered

    async def refresh(self) -> None:
        """Re-announce the pointer before it expires."""
        if self.last is not None:
            await self.directory.announce_version(self.last, self.peer.carrier.address)


class WeightFollower:
    def __init__(self, policy, peer: BroadcastPeer, directory: Directory, *, max_staleness: int = 2,
                 poll_s: float = 2.0):
        self.policy, self.peer, self.directory = policy, peer, directory
        self.max_staleness, self.poll_s = max_staleness, poll_s
        peer.max_staleness = max_staleness  # the version in flight is finished while within the bound
        self.pointer_version: int | None = None
        self.applied_versions = 0
        self.apply_failures = 0
        self.after_apply = None  # called (in the apply thread, under the weights lock): a vLLM engine's sync
        self.label: int | None = None  # the version the policy's weights are now, set with them
        # Whether this process has heard the source's pointer or a version from the network: a
        # restarted follower's saved version is of unknown age until then (its learner may be
        # many versions ahead), so it is not fresh enough to publish rollouts of.
        self.heard = False
        peer.on_version = self._received
        peer.resolve = self._resolve

    async def start(self) -> None:
        """Start serving; a restarted follower first puts back its last good version (one that no
        longer applies, say after a change of model in the same run folder, is dropped)."""
        last_good = await self.peer.start()
        if last_good is not None:
            try:
                await self._apply(*last_good)
            except Exception as e:  # noqa: BLE001 - the reason is logged; it waits for a new version
                log.warning("the saved weights version %d does not apply here (%s): waiting for a new one",
                            last_good[0].version, e)
                self.peer.applied = None
                if self.peer.store is not None:
                    self.peer.store.drop_manifest("applied")

    async def _received(self, m: Manifest, data: bytes) -> None:
        """A whole version from the network (not the saved one ``start`` puts back)."""
        self.heard = True
        await self._apply(m, data)

    async def _apply(self, m: Manifest, data: bytes) -> None:
        if m.model_fingerprint != self.policy.model_fingerprint or \
                not same_tokenizer(m.tokenizer_fingerprint, self.policy.tokenizer_fingerprint):
            self.apply_failures += 1
            raise ValueError(f"version {m.version} is for another model or tokenizer")
        def apply() -> None:
            # One critical section: the weights, the engine that samples them and the version label
            # change together, so no generation sees one without the others.
            with self.policy.weights_lock:
                apply_state(self.policy, data, m.format)
                if self.after_apply is not None:
                    self.after_apply()
                self.label = m.version

        try:
            await asyncio.to_thread(apply)
        except Exception:
            self.apply_failures += 1
            raise
        self.applied_versions += 1
        log.info("applied version %d of %s (learner step %d)", m.version, m.source, m.step)

    @property
    def applied(self) -> int | None:
        return self.peer.applied.version if self.peer.applied is not None else None

    @property
    def newest_seen(self) -> int | None:
        seen = [v for v in [self.peer.newest_known, self.pointer_version] if v is not None]
        return max(seen) if seen else None

    @property
    def lag(self) -> int | None:
        a, n = self.applied, self.newest_seen
        return None if a is None or n is None else n - a

    def fresh_enough(self) -> bool:
        return self.heard and fresh_enough(self.applied, self.newest_seen, self.max_staleness)

    async def _resolve(self, peers: list[str]) -> dict[str, tuple[str, int]]:
        """Addresses of ``peers`` into the peer's table (only theirs: the table stays as big as
        the versions held, however many ids crowd their shards); returns every announcement read."""
        followers = await self.directory.read_followers([p for p in peers if p != self.directory.source])
        for peer in peers:
            if peer in followers:
                self.peer.directory[peer] = followers[peer][0]  # a relay restarted on a new port is found again
        return followers

    def _prune_directory(self) -> None:
        keep = {self.directory.source, self.peer.me}
        keep.update(p for t in self.peer.held.values() for p in t.manifest.relays)
        for peer in [p for p in self.peer.directory if p not in keep]:
            del self.peer.directory[peer]

    async def poll_once(self) -> None:
        await self.directory.announce_follower(self.peer.carrier.address, self.applied)
        pointer = await self.directory.read_pointer()
        self._prune_directory()
        followers = await self._resolve([self.peer.me, *self.peer.neighbours()])
        if pointer is None:
            return
        self.peer.directory[self.directory.source] = pointer.address
        self.pointer_version = max(pointer.version, self.pointer_version or -1)
        self.heard = True
        newest = self.peer.newest_known  # held, or accepted and waiting its turn
        if newest is None or pointer.version > newest:  # an offer we missed (joined late, was down): ask for the
            # manifest the pointer names by digest: of the source first (a manifest is small, and a
            # follower's "I have it" is a claim anyone in our shard can make), then of two who say so
            # and have not failed us (a liar costs one request, and cannot hand over another version)
            retained = await self.directory.read_manifest(pointer.digest)  # (an MQTT broker keeps one)
            if retained is not None and self.peer.take_manifest(retained, pointer.digest):
                return
            have = [p for p, (_, v) in followers.items()
                    if v >= pointer.version and p != self.peer.me and p not in self.peer.suspects]
            for who in [self.directory.source, *have[:2]]:
                if who != self.directory.source:
                    self.peer.directory[who] = followers[who][0]
                if await self.peer.ask_manifest(who, pointer.digest):
                    break

    async def run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                log.warning("weights directory: %s: %s", type(e).__name__, e)
            except Exception:  # noqa: BLE001 - a bug must not end the following for good
                log.exception("weights directory: polling failed")
            await asyncio.sleep(self.poll_s)

    def status(self) -> dict:
        return {**self.peer.status(), "pointer_version": self.pointer_version, "lag": self.lag,
                "applied_versions": self.applied_versions, "apply_failures": self.apply_failures,
                "fresh_enough": self.fresh_enough(), "max_staleness": self.max_staleness}
