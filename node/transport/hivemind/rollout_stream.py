"""The rollout stream between two hivemind peers: a reader fetches one round's envelope from the
host its publisher's index entry names, and a host serves its own publisher's envelopes only.

    stream  /swarm-node/<swarm>/rollouts                request: u64 round | u8 n | publisher id (n bytes)
                                                        reply:   u64 length | envelope bytes
                                                        (a publisher serves only its own: a request
                                                        naming another id is refused at once, with
                                                        length 0 | u8 n | the id it serves)

The reader refuses a body framed larger than any envelope (``Oversized``) or than its index entry
announced (``NotAnnounced``) before reading a byte of it. ``Outbox`` holds what this node serves.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Callable, Iterator

from swarm_node.node.transport.base import MAX_ENVELOPE_SIZE
from swarm_node.node.transport.hivemind.records import PEER_ID_RE

__all__ = ["handler_name", "Outbox", "answer", "download", "read_request", "write_body", "Oversized",
           "NotAnnounced", "ServesAnother", "FETCH_TIMEOUT_S", "REQUEST_TIMEOUT_S"]

_U64 = struct.Struct(">Q")
FETCH_TIMEOUT_S = 10.0
OWNER_REPLY_TIMEOUT_S = 2.0  # a refusing host writes its answer at once
# A request is at most 264 bytes, sent at once: a total deadline, not one per read, so a stream
# trickling a byte at a time cannot hold a serve slot for three reads' worth of timeouts.
REQUEST_TIMEOUT_S = 2.0


def handler_name(swarm: str) -> str:
    return f"/swarm-node/{swarm}/rollouts"


class Oversized(Exception):
    def __init__(self, size: int):
        super().__init__(f"declared {size} bytes")


class NotAnnounced(Exception):
    def __init__(self, size: int):
        super().__init__(f"a {size}-byte body, not the size its index entry announced")


class ServesAnother(LookupError):
    """The host an entry names said it serves another publisher (its own word, over its
    authenticated stream)."""

    def __init__(self, owner: str, publisher: str):
        super().__init__(f"that host serves {owner}, not {publisher}")
        self.owner = owner


class Outbox:
    """This node's envelopes by round, each until it expires (DHT time): what it serves."""

    def __init__(self) -> None:
        self._rounds: dict[int, tuple[bytes, float]] = {}  # round -> (bytes, expires_at)

    def keep(self, round: int, data: bytes, now: float, expires_in: float) -> None:
        for r in [r for r, (_, exp) in self._rounds.items() if exp <= now]:
            del self._rounds[r]
        self._rounds[round] = (bytes(data), now + expires_in)

    def envelope(self, round: int) -> bytes:
        return self._rounds.get(round, (b"", 0))[0]

    def unexpired(self, now: float) -> Iterator[tuple[int, bytes, float]]:
        """(round, bytes, seconds left) of what has not expired by ``now``."""
        for r, (data, expires_at) in list(self._rounds.items()):
            if expires_at > now:
                yield r, data, expires_at - now

    def __len__(self) -> int:
        return len(self._rounds)


async def read_request(reader: asyncio.StreamReader) -> tuple[int, str]:
    """A request as a host reads it: (round, the publisher id asked for), all of it within
    ``REQUEST_TIMEOUT_S``."""
    return await asyncio.wait_for(_read_request(reader), REQUEST_TIMEOUT_S)


async def _read_request(reader: asyncio.StreamReader) -> tuple[int, str]:
    (round,) = _U64.unpack(await reader.readexactly(_U64.size))
    (n,) = await reader.readexactly(1)
    return round, (await reader.readexactly(n)).decode("ascii", "replace")


async def write_body(writer: asyncio.StreamWriter, data: bytes) -> None:
    """A reply with a body: its length, then the bytes (no concatenated copy of up to 4 MiB)."""
    writer.write(_U64.pack(len(data)))
    writer.write(data)
    await asyncio.wait_for(writer.drain(), FETCH_TIMEOUT_S)


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, publisher: str, outbox: Outbox,
                 on_refused: Callable[[], None]) -> None:
    """Answer one request on a stream opened to us: our envelope of the round asked for (length 0
    if we no longer hold it), or, when it names another publisher, ``on_refused()`` and whom we serve."""
    round, asked = await read_request(reader)
    if asked != publisher:
        # An index entry (someone else's, signed by them) pointing at our address: we never serve
        # our body for it, so junk entries cannot spend our upload. The reply says whom we serve:
        # over this authenticated stream only we can say it, and readers then skip every other
        # key's entry pointing here.
        on_refused()
        me = publisher.encode("ascii")
        writer.write(_U64.pack(0) + bytes([len(me)]) + me)
        await asyncio.wait_for(writer.drain(), FETCH_TIMEOUT_S)
        return
    await write_body(writer, outbox.envelope(round))
    # Close once the reader has closed its end: p2pd drops what is still in flight when the
    # server closes first (seen with the weight broadcast's 256 KiB replies under load).
    await asyncio.wait_for(reader.read(1), FETCH_TIMEOUT_S)


async def download(p2p, peer, swarm: str, round: int, publisher: str, declared: int) -> bytes:
    """``publisher``'s envelope of ``round`` from the host ``peer`` (``declared``: the size its
    index entry announced). Raises ``Oversized`` / ``NotAnnounced`` before reading a body framed
    larger than allowed or announced, ``ServesAnother`` when the host serves another publisher,
    ``LookupError`` when it no longer holds the round."""
    _, reader, writer = await p2p.call_binary_stream_handler(peer, handler_name(swarm))
    try:
        name = publisher.encode("ascii")
        writer.write(_U64.pack(round) + bytes([len(name)]) + name)
        await writer.drain()
        (size,) = _U64.unpack(await reader.readexactly(_U64.size))
        if size > MAX_ENVELOPE_SIZE:  # refuse before buffering a byte of it
            raise Oversized(size)
        if size == 0:  # routine (a restarted publisher, a round it dropped), or not its host
            owner = await _read_owner(reader)
            if owner is not None and owner != publisher:
                raise ServesAnother(owner, publisher)
            raise LookupError("the publisher no longer holds this round")
        if size != declared:  # not what the signed entry announced (and the size limit judged)
            raise NotAnnounced(size)
        return await reader.readexactly(size)
    finally:
        writer.close()


async def _read_owner(reader) -> str | None:
    """After a zero length, the publisher the host says it serves (absent from a publisher that
    only no longer holds the round)."""
    try:
        (n,) = await asyncio.wait_for(reader.readexactly(1), OWNER_REPLY_TIMEOUT_S)
        name = (await asyncio.wait_for(reader.readexactly(n), OWNER_REPLY_TIMEOUT_S)).decode("ascii")
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, UnicodeDecodeError, ConnectionError):
        return None
    return name if PEER_ID_RE.fullmatch(name) else None
