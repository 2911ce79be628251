"""Wire protocol of swarm-node, ``swarm_node.protocol``: what travels between nodes and what a
receiver checks. The lowest layer: it imports nothing of the project.

errors.py   SwarmError, the root of every deliberate error in the project; ProtocolError and
            its subclasses MalformedMessage, MessageTooLarge, UnsupportedVersion (wire rejections);
            TaskError and InvalidTaskId (the roots of the task errors rewards/ raises)
task_id.py  TaskId: ``family:seed:difficulty``, its syntax and the seed every node regenerates from
messages.py SCHEMA_VERSION, RolloutRecord, RolloutBatch ('rollouts'), Announcement ('announce');
            wire limits MAX_MESSAGE_BYTES, MAX_ROLLOUTS, MAX_COMPLETION_TOKENS, ...
codec.py    encode (canonical, deterministic msgpack) / decode (strict, size-capped) of messages
identity.py Identity: the node's Ed25519 key (file mode 0600) and the peer id derived from it
signing.py  Envelope, sign, envelope_to_bytes/from_bytes, Verifier (signature, sender, clock,
            replay checks; rejections counted by reason)
manifest.py the weight broadcast's signed manifest: chunk hashes, version, relay order
records.py  owner-signed records for carriers that keep values for anyone to read (MQTT retained)

The carriers that move these bytes are node/transport/ (docs/architecture.md).
"""
