"""A raw hivemind client: what anyone can run against the swarm without this project's code.

The DHT attacks (``displace``, ``far_expiry``) write through it and read every write back.
"""

from __future__ import annotations

import asyncio


class RawClient:
    """A plain ``hivemind.DHTNode`` in client mode, with no record validator: what anyone can run
    against the swarm without this project's code. It never stores on itself (``exclude_self``),
    and reads every write back: hivemind's store result is only the last replica's answer, while
    a read for the latest value meets every replica that kept one."""

    def __init__(self, initial_peers: list[str], host_maddrs: list[str], use_relay: bool, nat: bool):
        self.initial_peers, self.host_maddrs, self.use_relay, self.nat = initial_peers, host_maddrs, use_relay, nat
        self.node = None

    async def start(self) -> None:
        from hivemind.dht.node import DHTNode

        self.node = await DHTNode.create(initial_peers=self.initial_peers, host_maddrs=self.host_maddrs,
                                         client_mode=True, use_relay=self.use_relay, nat_port_map=self.nat,
                                         auto_nat=self.nat)

    @property
    def p2p_id(self) -> str:
        return self.node.peer_id.to_base58()

    async def put(self, entries: list[tuple[str, object, object, float]]) -> list[bool]:
        """Store (key, subkey or None, value, expiration) records; for each, whether any replica
        returns it afterwards (kept)."""
        if not entries:
            return []
        keys, subkeys, values, exps = map(list, zip(*entries))
        await self.node.store_many(keys, values, exps, subkeys=subkeys, exclude_self=True)
        return await self.kept(entries)

    async def kept(self, entries: list[tuple[str, object, object, float]], signed: bool = False) -> list[bool]:
        """For each record, whether a replica returns it: the same value (or, for ``signed``
        records, which travel wrapped, an entry of that subkey with that expiration)."""
        keys = list(dict.fromkeys(e[0] for e in entries))
        found = await self.node.get_many(keys, sufficient_expiration_time=float("inf"))
        out = []
        for key, subkey, value, exp in entries:
            got = found.get(key)
            if got is None:
                out.append(False)
            elif subkey is None:
                out.append(got.value == value)
            else:
                entry = got.value.get(subkey) if isinstance(got.value, dict) else None
                out.append(entry is not None and (abs(entry.expiration_time - exp) < 1e-3 if signed
                                                  else getattr(entry, "value", None) == value))
        return out

    async def close(self) -> None:
        if self.node is not None:
            try:
                await asyncio.wait_for(self.node.shutdown(), 10)
            except (asyncio.TimeoutError, ConnectionError, OSError):
                pass
            self.node = None

