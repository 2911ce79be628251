"""Wire protocol of swarm-node.

errors.py   SwarmError, the root of every deliberate error in the project

The signed msgpack envelopes, identities and transports arrive with the networking work
(see docs/architecture.md, "What comes next").
"""
