"""What a node does with the weight broadcast: its role (``broadcast.role``).

- ``full`` (the default): generate, train and share (SAPO); no broadcast.
- ``learner``: a full node that also publishes its weights (a broadcast version) every
  ``publish_every`` steps, starting with the weights it has at start, and treats the rollouts of
  the workers that follow it as its own older policy's: their policy version is one it published,
  which maps to exactly one of its updates, so the lag is exact, and rollouts more than
  ``max_staleness`` updates behind (or claiming a version it never published in this life) are
  dropped and counted (``worker_dropped_stale``). A broadcast version is ``learner.version +
  offset``; the offset is 0 unless the learner restarted behind a version it had already signed
  (resumed from an older checkpoint): then it jumps past it (``WeightSource.next_free_version``),
  so no number is signed twice. Workers whose rollouts it admitted at 3 steps (the last within 100:
  the sustained-work rule ``FOLLOWERS``, node/transport/work_ledger.py) are *vouched* and relay first.
- ``worker``: follows a learner's versions (node/broadcast/follow.py), generates with the newest
  applied one, publishes its rollouts labelled with that version, and trains nothing. It waits
  (and says so) until it has a version within ``max_staleness`` of the newest the learner
  announced. While it waits with no sign of the learner (no new version announced or applied, no
  new heartbeat of it, no chunk arriving) for ``learner_timeout`` seconds, the learner has
  stopped or left, and it stops with ``LearnerGone`` (exit 1), naming the learner. A worker that
  is up to date only warns after that silence (once, again after the next sign): a live learner
  sends no heartbeat and no version while it evaluates, checkpoints or takes a long step, so
  silence there proves less, and the worker's rollouts still reach the rest of the swarm.

The trainer calls a role at fixed points (``start``, ``before_step``, ``rollout_version``,
``admit_groups``, ``learns``, ``after_step``, ``status``, ``close``), each with the node's
``RoleContext`` (node/run/role_context.py): what a role may read and call, nothing more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from swarm_node.node.run.role_context import RoleContext
from swarm_node.node.errors import NodeError
from swarm_node.node.transport.work_ledger import FOLLOWERS, WorkLedger

log = logging.getLogger("swarm_node.node.broadcast.roles")  # the log name before the move: filters select it

__all__ = ["Role", "LearnerRole", "WorkerRole", "LearnerGone", "make_role"]

REFRESH_S = 20.0  # the learner re-announces its pointer and re-reads its followers this often


class Role:
    """The full node: no broadcast."""

    name = "full"
    learns = True

    async def start(self, ctx: RoleContext) -> None:
        pass

    async def before_step(self, ctx: RoleContext) -> None:
        pass

    def rollout_version(self, ctx: RoleContext) -> int | None:
        """The policy version this step's rollouts are labelled with (None: the trainer's own)."""
        return None

    def admit_groups(self, ctx: RoleContext, groups: list) -> tuple[list, dict]:
        return groups, {}

    async def after_step(self, ctx: RoleContext, record: dict) -> None:
        pass

    def status(self) -> dict:
        return {"role": self.name}

    async def close(self) -> None:
        pass


async def _broadcast_parts(ctx: RoleContext, follow: str | None):
    """The broadcast peer of this node and its weights directory, on the connection its transport
    already holds (``Transport.broadcast_parts``: hivemind's p2p daemon, the MQTT broker
    connection, the libp2p host)."""
    from swarm_node.node.transport.ratelimit import TokenBucket
    from swarm_node.node.broadcast.peer import BroadcastPeer
    from swarm_node.node.broadcast.store import ChunkStore

    bc = ctx.settings
    upload = TokenBucket(bc.upload_mbps * 1e6) if bc.upload_mbps > 0 else None
    carrier, directory = await ctx.transport.broadcast_parts(ctx.identity, follow or ctx.peer_id, upload)
    store = ChunkStore(ctx.run_dir / "broadcast")  # a follower's chunks; a source's last manifest
    peer = BroadcastPeer(ctx.identity, carrier, swarm=ctx.swarm_name, directory={}, follow=follow,
                         store=store if follow else None, max_staleness=bc.max_staleness)
    return peer, directory, store


class LearnerRole(Role):
    name = "learner"

    def __init__(self):
        self.source = None
        self.published: int | None = None
        self.offset = 0  # broadcast version - learner version (see the module doc)
        self.published_versions: dict[int, int] = {}  # broadcast version -> learner version, this life
        self.followers: set[str] = set()
        # follower -> [steps its rollouts of our versions were admitted at, the last]: the one
        # ledger of sustained work (node/transport/work_ledger.py, rule FOLLOWERS: 3 steps, the
        # last within 100; 512 followers kept)
        self._work = WorkLedger(FOLLOWERS)
        self.dropped_stale = 0
        self._task: asyncio.Task | None = None

    async def start(self, ctx: RoleContext) -> None:
        from swarm_node.node.broadcast.follow import WeightSource

        peer, directory, store = await _broadcast_parts(ctx, None)
        await peer.start()
        self.source = WeightSource(ctx.policy, peer, directory, fanout=ctx.settings.fanout, store=store)
        free = await self.source.next_free_version()
        self.offset = max(0, free - ctx.learner_version())
        if self.offset:
            log.warning("version %d was already signed (this learner restarted behind it): broadcast versions "
                        "are learner versions + %d from now on", free - 1, self.offset)
        await self._publish(ctx)  # the weights it starts with: workers can begin at once
        self._task = asyncio.ensure_future(self._refresh())

    async def _publish(self, ctx: RoleContext) -> None:
        version, step = ctx.learner_version() + self.offset, ctx.step()
        m = await self.source.publish(version=version, step=step, vouched=self.vouched_at(step))
        self.published = m.version
        self.published_versions[m.version] = ctx.learner_version()
        self.followers = set(m.relays) | self.followers
        log.info("published weights version %d (step %d, %d bytes, %d relays)", m.version, step,
                 m.total_size, len(m.relays))

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await self.source.refresh()
                # what the DHT holds now (not a union over time: a flood of identities ages out)
                read = set(await self.source.directory.read_followers())
                self.followers = read | set(self._work) | set(self.source.last.relays if self.source.last else ())
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                log.warning("weights directory: %s: %s", type(e).__name__, e)

    def admit_groups(self, ctx: RoleContext, groups: list) -> tuple[list, dict]:
        s, v_now = ctx.settings.max_staleness, ctx.learner_version()
        kept, lags, dropped = [], [], 0
        for g in groups:
            if g.sender not in self.followers:
                kept.append(g)  # a full peer's rollouts: its own versions, bounded by rounds
                continue
            made_at = self.published_versions.get(g.policy_version)
            if made_at is not None and 0 <= v_now - made_at <= s:
                # relabelled with the learner's own update count: what the correction and the
                # metrics read is the learner's version, whatever the broadcast offset
                kept.append(dataclasses.replace(g, policy_version=made_at))
                lags.append(v_now - made_at)
                self._worked(g.sender, ctx.step())
            else:
                dropped += 1
        self.dropped_stale += dropped
        info = {"worker_groups": len(lags), "worker_lag_mean": (sum(lags) / len(lags)) if lags else None,
                "worker_dropped_stale": self.dropped_stale}
        return kept, info

    def _worked(self, peer: str, step: int) -> None:
        self._work.record(peer, step, window=True)  # its 3 steps inside one window of 100

    def vouched_at(self, step: int) -> set[str]:
        """Followers whose rollouts of our versions were admitted at the rule's number of steps,
        the last recently: sustained work, which one labelled batch from a fresh id is not."""
        return {p for p in self._work if self._work.proven(p, now=step)}

    @property
    def vouched(self) -> set[str]:
        return {p for p in self._work if self._work.proven(p)}

    async def after_step(self, ctx: RoleContext, record: dict) -> None:
        k = ctx.settings.publish_every
        if ctx.learner_version() + self.offset != self.published and ctx.step() % k == 0:
            await self._publish(ctx)
            # versions past the staleness bound can no longer be admitted: forget them
            floor = ctx.learner_version() - ctx.settings.max_staleness
            self.published_versions = {b: v for b, v in self.published_versions.items() if v >= floor}
        record["published_version"] = self.published

    def status(self) -> dict:
        st = self.source.peer.status() if self.source else {}
        return {"role": self.name, "published_version": self.published, "followers": len(self.followers),
                "vouched": len(self.vouched), "version_offset": self.offset,
                "worker_dropped_stale": self.dropped_stale, "served_bytes": st.get("served_bytes", 0),
                "turned_away": st.get("turned_away", 0)}

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.source is not None:
            await self.source.peer.close()
            await self.source.directory.close()


class LearnerGone(NodeError):
    """A worker waited for weights and its learner gave no sign of life for ``learner_timeout`` s."""


class WorkerRole(Role):
    name = "worker"
    learns = False

    def __init__(self):
        self.follower = None
        self._task: asyncio.Task | None = None
        self._version: int | None = None
        self._sign: tuple | None = None  # what the worker last saw of its learner ...
        self._sign_at = 0.0  # ... and since when (monotonic)
        self._silence_said = False  # up to date, the learner's silence was warned of

    def _learner_seen(self, ctx: RoleContext) -> float:
        """When the learner last gave a sign this worker can see: a newer version announced or
        applied, a new heartbeat of it in the swarm, or chunks of a version arriving (a slow link
        is no silence); while this node's own swarm link is down, now (it could not hear one)."""
        f = self.follower
        if not ctx.link_up():  # this node hears no one: its own outage says nothing of the learner
            self._sign, self._sign_at = None, time.monotonic()
            return self._sign_at
        t = f.peer.status().get("transfer") or {}
        sign = (f.newest_seen, f.applied, ctx.heard_at(f.directory.source), t.get("version"), t.get("bytes"))
        if sign != self._sign:
            self._sign, self._sign_at = sign, time.monotonic()
        return self._sign_at

    async def start(self, ctx: RoleContext) -> None:
        from swarm_node.node.broadcast.follow import WeightFollower

        bc = ctx.settings
        peer, directory, _ = await _broadcast_parts(ctx, bc.follow)
        self.follower = WeightFollower(ctx.policy, peer, directory, max_staleness=bc.max_staleness, poll_s=1.0)
        if ctx.after_apply is not None:  # the vLLM engine samples: every applied version goes into it too
            self.follower.after_apply = ctx.after_apply
        await self.follower.start()
        self._task = asyncio.ensure_future(self.follower.run())

    async def before_step(self, ctx: RoleContext) -> None:
        f = self.follower
        since = time.monotonic()
        timeout = ctx.settings.learner_timeout
        if f.fresh_enough():
            self._warn_if_silent(ctx, timeout)
        while not f.fresh_enough() and not ctx.stop_requested():
            what = ("no version yet" if f.applied is None
                    else f"version {f.applied} (saved) applied, the learner not heard yet" if not f.heard
                    else f"version {f.applied} applied, the learner announced {f.newest_seen}")
            silent = time.monotonic() - max(self._learner_seen(ctx), since)
            if timeout and silent > timeout:
                why = (f"the learner {f.directory.source} (--follow) gave no sign for {silent:.0f} s while this worker "
                       f"waited for weights within broadcast.max_staleness {ctx.settings.max_staleness} ({what}): no "
                       f"new version, no heartbeat, no chunk arriving. It has stopped or left the swarm; start the "
                       f"worker again once the learner runs (or follow another), or raise --broadcast.learner_timeout")
                ctx.set_phase("stopped", why)
                raise LearnerGone(why)
            t = f.peer.status().get("transfer")
            if t:
                what += f"; receiving version {t['version']}: {t['bytes'] / 1e6:.1f} of {t['total'] / 1e6:.1f} MB"
            ctx.set_phase("waiting for the learner's weights",
                          f"{what} (following {f.directory.source}, {time.monotonic() - since:.0f} s)")
            await asyncio.sleep(0.2)

    def _warn_if_silent(self, ctx: RoleContext, timeout: float) -> None:
        """Up to date: a long silence of the learner is said once (again after its next sign)."""
        silent = time.monotonic() - self._learner_seen(ctx)
        if not timeout or silent <= timeout:
            self._silence_said = False
        elif not self._silence_said:
            self._silence_said = True
            log.warning("the learner %s (--follow) gave no sign for %.0f s (no new version, no heartbeat, no chunk "
                        "arriving): it may have stopped or left; this worker goes on generating with version %s, "
                        "the newest it announced", self.follower.directory.source, silent, self.follower.applied)

    def rollout_version(self, ctx: RoleContext) -> int | None:
        return self.follower.label  # set under the weights lock with the weights themselves

    async def after_step(self, ctx: RoleContext, record: dict) -> None:
        st = self.follower.status()
        record.update({"applied_version": st["applied_version"], "version_lag": st["lag"],
                       "versions_applied": st["applied_versions"]})

    def status(self) -> dict:
        st = self.follower.status() if self.follower else {}
        return {"role": self.name, "following": self.follower.directory.source if self.follower else None, **st}

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.follower is not None:
            await self.follower.peer.close()
            await self.follower.directory.close()


def make_role(name: str) -> Role:
    return {"full": Role, "learner": LearnerRole, "worker": WorkerRole}[name]()
