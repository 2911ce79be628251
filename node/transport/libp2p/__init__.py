"""The daemon-free carrier: py-libp2p, in one folder.

    transport.py      Libp2pTransport: rollouts and heartbeats over gossipsub, large bodies by stream
    host.py           the libp2p host on the node's own Ed25519 key: gossipsub and streams
    peer_exchange.py  how the host finds peers: the bootstrap addresses, then peer exchange
    frames.py         the topic and protocol names, the rollout topic's frames (a body or a pointer
                      to one), and whose a libp2p id or address is
    serving.py        how often the node serves one of its own large bodies: per peer, and a cap
                      on what strangers may cost it
    trio_bridge.py    py-libp2p's trio loop in its own thread, bridged to asyncio
    budget.py         the gossip check budget (pure): bounds floods before the costly check
                      (its strangers' share: node/transport/ratelimit.py's bucket)
    carrier.py        the weight broadcast's request/reply over libp2p streams
    directory.py      the weight broadcast's owner-signed records over gossip
    bootstrap.py      ``swarm-node bootstrap --transport libp2p``
    settings.py       the transport's arguments from the ``[swarm]`` config (imports no py-libp2p)

Imported only when selected: hivemind and py-libp2p cannot share a process.
"""
