"""Which libp2p hosts served each publisher a body that matched its owner-signed index entry (pure,
bounded): the only hosts a hivemind node can vouch for as that publisher's own.

A heartbeat's addresses are the publisher's claim, signed but unproven: they may name any
``/p2p/`` id, another node's or a host that does nothing. A body fetched from a host and hashing
to the sha256 the publisher signed into its index entry is proof that the host serves that
publisher (an honest host serves only its own publisher's bodies: node/transport/hivemind/rollout_stream.py).
The peer cache keeps only heartbeat addresses of such hosts (``HivemindTransport.is_own_address``).
"""

from __future__ import annotations

import collections

__all__ = ["ServedHosts", "MAX_PUBLISHERS", "HOSTS_PER_PUBLISHER"]

MAX_PUBLISHERS = 4096  # publishers remembered, the least recently served forgotten first
HOSTS_PER_PUBLISHER = 2  # a restarted daemon with a fresh key is a second host; older ones go


class ServedHosts:
    def __init__(self):
        self.hosts: collections.OrderedDict[str, list[str]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self.hosts)

    def note(self, publisher: str, host: str) -> None:
        """``host`` served ``publisher`` a body that matched its index entry."""
        hosts = [h for h in self.hosts.pop(publisher, []) if h != host] + [host]
        self.hosts[publisher] = hosts[-HOSTS_PER_PUBLISHER:]
        while len(self.hosts) > MAX_PUBLISHERS:
            self.hosts.popitem(last=False)

    def served(self, publisher: str, host: str) -> bool:
        return host in self.hosts.get(publisher, ())
