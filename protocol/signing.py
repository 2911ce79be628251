"""Signed envelopes: how a node authenticates every message it sends to the swarm.

A message (already msgpack-encoded by ``protocol.codec``; opaque here) travels inside an
``Envelope`` that names the sender's peer id and public key, carries a per-sender sequence
number, a random nonce and a timestamp, and is signed with the sender's Ed25519 key. The
receiving node runs ``Verifier.verify`` on every envelope before decoding the payload, which
rejects forged, tampered, impersonating, replayed and badly-clocked messages, and counts the
rejections by reason so the node can expose them as metrics.

Signed bytes (canonical, unambiguous: fixed-width fields plus length prefixes, big-endian)::

    b"swarm-node/envelope/v1\\0"
    u16 len(sender) | sender (ASCII) | public_key (32) | u64 seq | nonce (16)
    | f64 timestamp | u32 len(payload) | payload

Wire framing (``envelope_to_bytes``), big-endian, exact length required::

    b"SNE1" | u16 len(sender) | sender | public_key (32) | u64 seq | nonce (16)
    | f64 timestamp | u32 len(payload) | payload | signature (64)
"""

from __future__ import annotations

import collections
import enum
import logging
import math
import os
import struct
import threading
import time
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from swarm_node.protocol.errors import SigningError
from swarm_node.protocol.identity import PUBLIC_KEY_SIZE, Identity, peer_id_from_public_key

__all__ = [
    "DOMAIN_PREFIX",
    "MAX_ENVELOPE_SIZE",
    "MAX_PAYLOAD_SIZE",
    "Envelope",
    "SigningError",
    "Verifier",
    "VerifyResult",
    "canonical_bytes",
    "envelope_from_bytes",
    "envelope_to_bytes",
    "next_seq",
    "sign",
]

logger = logging.getLogger(__name__)

# Domain separation: a signature over an envelope can never be replayed as a signature over
# some other structure this key signs (and vice versa); bump "v1" if the layout changes.
DOMAIN_PREFIX = b"swarm-node/envelope/v1\0"
WIRE_MAGIC = b"SNE1"
NONCE_SIZE = 16
SIGNATURE_SIZE = 64
MAX_PAYLOAD_SIZE = 4 * 1024 * 1024
# Peer ids are 35 chars today; the slack allows a future id scheme without a format bump.
MAX_SENDER_SIZE = 128
MAX_SEQ = 2**64 - 1

_PREFIX = struct.Struct(">4sH")  # magic, sender length
_MIDDLE = struct.Struct(f">{PUBLIC_KEY_SIZE}sQ{NONCE_SIZE}sdI")  # key, seq, nonce, ts, payload len
# The largest well-formed frame: transports refuse anything bigger before reading it.
MAX_ENVELOPE_SIZE = _PREFIX.size + MAX_SENDER_SIZE + _MIDDLE.size + MAX_PAYLOAD_SIZE + SIGNATURE_SIZE


@dataclass(frozen=True)
class Envelope:
    """A signed message as it travels between nodes (see module doc for the signed bytes)."""

    sender: str
    public_key: bytes
    seq: int
    nonce: bytes
    timestamp: float
    payload: bytes
    signature: bytes


class VerifyResult(str, enum.Enum):
    """Outcome of ``Verifier.verify``; the value doubles as the metrics label."""

    ACCEPTED = "ACCEPTED"
    BAD_SIGNATURE = "BAD_SIGNATURE"
    SENDER_MISMATCH = "SENDER_MISMATCH"
    REPLAY = "REPLAY"
    STALE_CLOCK = "STALE_CLOCK"
    MALFORMED = "MALFORMED"


def _fields_ok(sender: object, public_key: object, seq: object, nonce: object,
               timestamp: object, payload: object) -> bool:
    """Type and size checks shared by signing, parsing and verifying (never raises)."""
    return (
        isinstance(sender, str)
        and sender.isascii()
        and 0 < len(sender) <= MAX_SENDER_SIZE
        and isinstance(public_key, bytes)
        and len(public_key) == PUBLIC_KEY_SIZE
        # bool is an int subclass; a True seq is a bug, not a sequence number.
        and isinstance(seq, int)
        and not isinstance(seq, bool)
        and 0 <= seq <= MAX_SEQ
        and isinstance(nonce, bytes)
        and len(nonce) == NONCE_SIZE
        and isinstance(timestamp, float)
        and math.isfinite(timestamp)
        and isinstance(payload, bytes)
        and len(payload) <= MAX_PAYLOAD_SIZE
    )


def _well_formed(env: object) -> bool:
    return (
        isinstance(env, Envelope)
        and _fields_ok(env.sender, env.public_key, env.seq, env.nonce, env.timestamp, env.payload)
        and isinstance(env.signature, bytes)
        and len(env.signature) == SIGNATURE_SIZE
    )


def _header(sender: str, public_key: bytes, seq: int, nonce: bytes, timestamp: float,
            payload_len: int) -> bytes:
    sender_b = sender.encode("ascii")
    return (
        struct.pack(">H", len(sender_b))
        + sender_b
        + _MIDDLE.pack(public_key, seq, nonce, timestamp, payload_len)
    )


def canonical_bytes(sender: str, public_key: bytes, seq: int, nonce: bytes, timestamp: float,
                    payload: bytes) -> bytes:
    """The exact bytes an envelope's signature covers (fields assumed already validated)."""
    return DOMAIN_PREFIX + _header(sender, public_key, seq, nonce, timestamp, len(payload)) + payload


def next_seq(prev: int) -> int:
    """The sequence number to sign with after ``prev``: time-based (microseconds), so a restarted
    node (same key, fresh process) never reuses one its peers remember and see as a replay. The one
    rule for every signer (the exchange, and the adversary that must look honest)."""
    return max(prev + 1, time.time_ns() // 1000)


def sign(payload: bytes, identity: Identity, seq: int, now: float | None = None) -> Envelope:
    """Wrap ``payload`` in an envelope signed by ``identity`` with a fresh random nonce."""
    timestamp = float(time.time() if now is None else now)
    nonce = os.urandom(NONCE_SIZE)
    if not _fields_ok(identity.peer_id, identity.public_key_bytes, seq, nonce, timestamp, payload):
        raise SigningError(
            f"cannot sign: payload must be bytes of at most {MAX_PAYLOAD_SIZE} bytes, seq an int "
            f"in [0, 2**64) and the timestamp finite (got seq={seq!r}, "
            f"payload {type(payload).__name__} of {len(payload) if isinstance(payload, bytes) else '?'} bytes)"
        )
    message = canonical_bytes(identity.peer_id, identity.public_key_bytes, seq, nonce, timestamp, payload)
    return Envelope(
        sender=identity.peer_id,
        public_key=identity.public_key_bytes,
        seq=seq,
        nonce=nonce,
        timestamp=timestamp,
        payload=payload,
        signature=identity.sign(message),
    )


def envelope_to_bytes(env: Envelope) -> bytes:
    """Serialize ``env`` to the wire framing (see module doc)."""
    if not _well_formed(env):
        raise SigningError("cannot serialize a malformed envelope")
    sender_b = env.sender.encode("ascii")
    return b"".join((
        _PREFIX.pack(WIRE_MAGIC, len(sender_b)),
        sender_b,
        _MIDDLE.pack(env.public_key, env.seq, env.nonce, env.timestamp, len(env.payload)),
        env.payload,
        env.signature,
    ))


def envelope_from_bytes(data: bytes) -> Envelope | None:
    """Parse the wire framing strictly; ``None`` for anything malformed (never raises)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return None
    data = bytes(data)
    # Smallest possible frame; also guarantees the fixed-size unpacks below have enough bytes.
    if len(data) < _PREFIX.size + 1 + _MIDDLE.size + SIGNATURE_SIZE:
        return None
    magic, sender_len = _PREFIX.unpack_from(data, 0)
    if magic != WIRE_MAGIC or not 0 < sender_len <= MAX_SENDER_SIZE:
        return None
    pos = _PREFIX.size
    if len(data) < pos + sender_len + _MIDDLE.size + SIGNATURE_SIZE:
        return None
    sender_b = data[pos:pos + sender_len]
    pos += sender_len
    public_key, seq, nonce, timestamp, payload_len = _MIDDLE.unpack_from(data, pos)
    pos += _MIDDLE.size
    # Check the declared length before slicing, and require the frame to end exactly after the
    # signature: no trailing bytes that a signature does not cover.
    if payload_len > MAX_PAYLOAD_SIZE or len(data) != pos + payload_len + SIGNATURE_SIZE:
        return None
    payload = data[pos:pos + payload_len]
    signature = data[pos + payload_len:]
    if not sender_b.isascii():
        return None
    sender = sender_b.decode("ascii")
    if not _fields_ok(sender, public_key, seq, nonce, timestamp, payload):
        return None
    return Envelope(sender, public_key, seq, nonce, timestamp, payload, signature)


@dataclass
class _SenderState:
    """Replay memory for one sender: recently accepted seqs (with their nonces and signed
    timestamps) and nonces."""

    highest_seq: int = -1
    seqs: collections.OrderedDict[int, tuple[bytes, float]] = field(default_factory=collections.OrderedDict)
    # The newest seq the full window pushed out, and the newest timestamp among those pushed out:
    # a seq at or below it may be a replay for as long as that timestamp is inside the clock window.
    evicted_seq: int = -1
    evicted_ts: float = float("-inf")
    nonces: set[bytes] = field(default_factory=set)


class Verifier:
    """Checks incoming envelopes and remembers enough to reject replays (bounded memory).

    Replay rule, per sender: an envelope is a replay if its seq was already accepted, its nonce
    was already seen, or its seq is older than everything still remembered once the window is
    full (we can no longer prove it fresh). Out-of-order delivery inside the window is allowed.
    Memory: at most ``replay_window`` (seq, nonce) pairs per sender and ``max_senders`` senders
    (least-recently-accepted sender is forgotten first). A forgotten sender's old envelopes are
    still bounded by the clock check: they are rejected once older than ``max_skew_s``.

    Thread-safe: admission runs its checks in worker threads (``admit_off_loop``, gossipsub's
    validator) while the loop commits; the replay memory and the counts change under one lock,
    and the signature (the costly part) is checked outside it.

    That same check is why an envelope signed more than ``max_skew_s`` ago need not be remembered:
    it can only come back as STALE_CLOCK. Such entries are forgotten as new ones arrive (and in a
    sweep of every sender every ``SWEEP_EVERY`` envelopes), so what is held is what the swarm sent
    in the last ``max_skew_s`` seconds, not what it sent since the node started: a node that runs
    for days beside a thousand peers does not fill ``replay_window`` for each of them.

    Forgetting moves a floor up: an envelope signed before ``now - max_skew_s`` as of any
    forgetting is refused as STALE_CLOCK from then on, even if this machine's clock steps back
    (or a caller passes an earlier ``now``): what was forgotten can never come back as new. Seqs
    pushed out by a full window stay refused while the newest of them is inside the clock window.
    """

    SWEEP_EVERY = 1024

    def __init__(self, max_skew_s: float = 30.0, replay_window: int = 4096,
                 max_senders: int = 10_000) -> None:
        if not (max_skew_s > 0 and replay_window > 0 and max_senders > 0):
            raise ValueError("max_skew_s, replay_window and max_senders must be positive")
        self.max_skew_s = float(max_skew_s)
        self.replay_window = int(replay_window)
        self.max_senders = int(max_senders)
        self.counts: collections.Counter[str] = collections.Counter()
        self._senders: collections.OrderedDict[str, _SenderState] = collections.OrderedDict()
        self._remembered = 0  # envelopes remembered so far (drives the sweep)
        self._floor = float("-inf")  # envelopes signed before this are refused: what was forgotten
        self._lock = threading.Lock()

    def verify(self, env: Envelope, now: float | None = None, *, commit: bool = True) -> VerifyResult:
        """Classify ``env``; never raises. With ``commit`` (the default) an ACCEPTED envelope is
        remembered for replay detection at once. A caller that runs more checks after this one
        passes ``commit=False`` and calls ``commit(env)`` only once every check has passed:
        otherwise a copy of an honest envelope that fails a later check (re-published under the
        wrong round, say) would be remembered, and the honest delivery then refused as a replay.
        """
        now = time.time() if now is None else now
        result = self._check_signed(env)
        with self._lock:
            if result is VerifyResult.ACCEPTED:
                result = self._check_fresh(env, now)
            self.counts[result.value] += 1
            if result is VerifyResult.ACCEPTED and commit:
                self._remember(env, now)
        if result is not VerifyResult.ACCEPTED:
            sender = env.sender if isinstance(env, Envelope) else None
            logger.debug("rejected envelope from %.64r: %s", sender, result.value)
        return result

    def commit(self, env: Envelope, now: float | None = None) -> bool:
        """Remember an envelope that ``verify(..., commit=False)`` accepted; False (and nothing
        remembered) if it has become a replay in between."""
        now = time.time() if now is None else now
        with self._lock:
            if env.timestamp <= self._floor or self._is_replay(env, now):
                return False
            self._remember(env, now)
            return True

    def verify_fresh(self, env: Envelope, now: float | None = None) -> VerifyResult:
        """``verify(env, now, commit=False)`` without the signature, for an envelope this verifier
        already accepted (a caller that cached its verdict on the exact bytes, e.g. a gossip gate's):
        the clock and replay checks run again, since they change with time and with what was
        remembered since; form, key and signature cannot. Passing an envelope ``verify`` never
        accepted skips its signature check: that is the caller's bug. Counted in ``counts`` as
        ``verify`` counts, so ``counts`` stay one per verdict given (a message checked twice counts
        twice whether or not its signature was checked twice). Remembers nothing."""
        now = time.time() if now is None else now
        with self._lock:  # never raises, as verify: a malformed one is counted and refused
            result = self._check_fresh(env, now) if _well_formed(env) else VerifyResult.MALFORMED
            self.counts[result.value] += 1
        if result is not VerifyResult.ACCEPTED:
            sender = env.sender if isinstance(env, Envelope) else None
            logger.debug("rejected envelope from %.64r: %s", sender, result.value)
        return result

    def remembered(self) -> int:
        """(seq, nonce) pairs held, over every sender."""
        with self._lock:
            return sum(len(st.seqs) for st in self._senders.values())

    def _check_signed(self, env: Envelope) -> VerifyResult:
        """Form, key and signature: no state read, so no lock."""
        if not _well_formed(env):
            return VerifyResult.MALFORMED
        # Before the signature: a valid signature by key B proves nothing about peer id A.
        if peer_id_from_public_key(env.public_key) != env.sender:
            return VerifyResult.SENDER_MISMATCH
        try:
            public_key = Ed25519PublicKey.from_public_bytes(env.public_key)
        except ValueError:
            return VerifyResult.MALFORMED
        message = canonical_bytes(env.sender, env.public_key, env.seq, env.nonce, env.timestamp,
                                  env.payload)
        try:
            public_key.verify(env.signature, message)
        except InvalidSignature:
            return VerifyResult.BAD_SIGNATURE
        return VerifyResult.ACCEPTED

    def _check_fresh(self, env: Envelope, now: float) -> VerifyResult:
        """Clock and replay (under the lock), after the signature: an unauthenticated timestamp is
        not worth reporting as skew."""
        if abs(env.timestamp - now) > self.max_skew_s or env.timestamp <= self._floor:
            return VerifyResult.STALE_CLOCK
        if self._is_replay(env, now):
            return VerifyResult.REPLAY
        return VerifyResult.ACCEPTED

    def _is_replay(self, env: Envelope, now: float) -> bool:
        state = self._senders.get(env.sender)
        if state is None:
            return False
        if env.seq in state.seqs or env.nonce in state.nonces:
            return True
        if env.seq <= state.evicted_seq and state.evicted_ts >= now - self.max_skew_s:
            return True  # pushed out by the full window while it could still pass the clock check
        # Window full and this seq is older than the oldest remembered: cannot prove it fresh.
        return len(state.seqs) >= self.replay_window and env.seq < next(iter(state.seqs))

    def _remember(self, env: Envelope, now: float) -> None:
        state = self._senders.get(env.sender)
        if state is None:
            state = self._senders[env.sender] = _SenderState()
            if len(self._senders) > self.max_senders:
                forgotten, _ = self._senders.popitem(last=False)
                logger.debug("replay memory full, forgetting sender %s", forgotten)
        else:
            self._senders.move_to_end(env.sender)
        state.seqs[env.seq] = (env.nonce, env.timestamp)
        state.nonces.add(env.nonce)
        if env.seq > state.highest_seq:
            state.highest_seq = env.seq
        else:
            # Keep seqs sorted ascending so the first key is always the oldest remembered.
            for seq in [s for s in state.seqs if s > env.seq]:
                state.seqs.move_to_end(seq)
        while len(state.seqs) > self.replay_window:
            old_seq, (old_nonce, old_ts) = state.seqs.popitem(last=False)
            state.nonces.discard(old_nonce)
            state.evicted_seq = max(state.evicted_seq, old_seq)
            state.evicted_ts = max(state.evicted_ts, old_ts)
        self._forget_expired(state, now)
        self._remembered += 1
        if self._remembered % self.SWEEP_EVERY == 0:
            self._sweep(now)

    def _forget_expired(self, state: _SenderState, now: float) -> None:
        """Drop, oldest seq first, what the clock check would reject anyway. (A seq whose
        timestamp is out of order stays until those before it go: memory, never safety.)"""
        cutoff = now - self.max_skew_s
        while state.seqs:
            seq, (nonce, ts) = next(iter(state.seqs.items()))
            if ts >= cutoff:
                break
            del state.seqs[seq]
            state.nonces.discard(nonce)
            self._floor = max(self._floor, ts)  # it, and anything signed before it, stays refused

    def _sweep(self, now: float) -> None:
        """Forget expired entries of every sender, and senders with nothing left (gone quiet)."""
        for sender in list(self._senders):
            state = self._senders[sender]
            self._forget_expired(state, now)
            if not state.seqs and state.evicted_ts < now - self.max_skew_s:
                del self._senders[sender]
