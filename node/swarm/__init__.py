"""The swarm exchange: what a node publishes, what it admits from peers, and which peer groups it takes.

    exchange.py    SwarmExchange: publish, receive, admission checks, the peer pool and ``take``
    link.py        a transport wrapped with reconnect and back-off (the exchange's one way out)

It talks to peers only through ``node.transport.Transport``; it knows no carrier.
"""
