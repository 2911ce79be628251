"""Wire protocol of swarm-node.

errors.py   SwarmError, the root of every deliberate error in the project; ProtocolError and
            its subclasses MalformedMessage, MessageTooLarge, UnsupportedVersion (wire rejections)
messages.py SCHEMA_VERSION, RolloutRecord, RolloutBatch ('rollouts'), Announcement ('announce');
            wire limits MAX_MESSAGE_BYTES, MAX_ROLLOUTS, MAX_COMPLETION_TOKENS, ...
codec.py    encode (canonical, deterministic msgpack) / decode (strict, size-capped) of messages
identity.py Identity: the node's Ed25519 key (file mode 0600) and the peer id derived from it
signing.py  Envelope, sign, envelope_to_bytes/from_bytes, Verifier (signature, sender, clock,
            replay checks; rejections counted by reason)

Transports and their wiring into the node arrive with the networking work
(see docs/architecture.md, "What comes next").
"""
