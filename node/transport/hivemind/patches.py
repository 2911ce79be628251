"""Fixes to hivemind's DHT that a hostile peer could otherwise exploit, and one leak; applied on import.

Written against hivemind 1.1.12 (the version ``pyproject.toml`` pins, ``>=1.1.12,<1.2``). Every
node of the swarm keeps its round index entries and heartbeats as *dictionary* values: one DHT
key, one subkey per peer, each subkey an owner-signed record with its own expiration. Two
behaviours of hivemind let one peer take away other peers' entries:

1. **One refused subkey discards a whole dictionary.** ``DHTProtocol._validate_dictionary``
   (``hivemind/dht/protocol.py``) returns False as soon as one subkey record fails the record
   validator, and its two callers then drop everything: ``call_find`` treats that replica's
   reply for the key as "not found", ``rpc_store`` refuses the whole dictionary (the form in
   which ``update_routing_table`` hands a newcomer the keys it should hold, and in which
   ``cache_nearest`` pushes lookups). Nodes need not agree on validity (clock skew against the
   expiry limits, a record that crosses a limit as time passes), so one record that one
   replica accepted and we refuse censors every honest peer's entry under that key on that
   replica. Patched: the refused subkeys are removed and the rest kept. If none is left the
   answer is what it was (False: nothing from that replica / store refused), and a dictionary
   with no subkeys at all still passes. A refused record must not lend its expiration to what
   remains, so the dictionary's ``latest_expiration_time`` is recomputed from the kept subkeys,
   and ``call_find`` lowers the replica's reported expiration for the key to it (otherwise a
   refused far-future subkey would make an otherwise-expired reply look fresh, end a lookup
   early, and be cached with that expiration). One difference remains: a whole-dictionary
   store that was partly refused reports ``store_ok`` for the kept part (the original reported
   False). hivemind's internal callers ignore that result.

2. **A refused store still reschedules the expiry.** ``TimedStorage.store``
   (``hivemind/utils/timed_storage.py``) sets ``key_to_heap[key]`` and pushes a heap entry for
   the offered expiration *before* checking whether the stored value is newer. A refused older
   store (same key or subkey, earlier but unexpired expiration, such as a replay of the
   owner's previous signed heartbeat, which every replica serves and whose signature still
   holds) makes the earlier entry the live one: when it pops, ``_remove_outdated`` deletes the
   current, newer value, and the newer value's own heap entry is then a stale leftover.
   Patched: a refused store returns before touching the heap. ``DictionaryDHTValue`` (one
   dictionary's subkeys) and ``DHTLocalStorage`` (a node's storage and cache) inherit the fix.

And one leak, which no peer causes:

3. **A finished lookup leaves its key behind.** ``DHTNode.get_many_by_id``
   (``hivemind/dht/node.py``) files every lookup under its key in ``pending_get_requests`` (a
   ``defaultdict`` of ``SortedSet``), so that concurrent lookups of one key share the first
   answer; ``_reuse_finished_search_result`` then empties that set but never removes the key. A
   node keeps an empty set (with its sorted list and bound methods) and the key's ``DHTID``,
   about 2 KB, for every key it ever looked up, and a swarm node reads new keys every round (each
   round's index shards at each level): tens of MB an hour, the creep the one-hour soak measured
   (docs/results/soak.md). Patched: the key is removed once no lookup of it is pending, and a
   late callback no longer re-creates it. Which lookups share an answer is unchanged.

``apply()`` runs at import and is idempotent. On another hivemind version a patch is still
applied if the method it replaces has the expected parameters, and skipped with a warning if
not. The transport needs only ``import swarm_node.node.transport.hivemind.patches  # noqa: F401`` before it
creates nodes. ``ORIGINALS`` keeps the replaced functions (tests use them to show the bugs).
"""

from __future__ import annotations

import functools
import heapq
import inspect
import logging
import math
from importlib.metadata import PackageNotFoundError, version

from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.dht.validation import DHTRecord
from hivemind.utils import timed_storage
from hivemind.utils.timed_storage import HeapEntry, TimedStorage, ValueWithExpiration

log = logging.getLogger(__name__)

__all__ = ["APPLIED", "ORIGINALS", "WRITTEN_FOR", "apply"]

WRITTEN_FOR = "1.1.12"
ORIGINALS: dict[str, object] = {}  # "Class.method" -> the hivemind function it replaced
APPLIED: set[str] = set()  # the patches in effect in this process
_applied = False  # the guard: apply() patches once per process
MAX_REPLY_TTL_S = 3600.0 + 60.0  # no swarm-node record outlives this (node/transport/hivemind/records.py)


# ---- 1. keep a dictionary's valid subkeys ----------------------------------------------------


def _valid(validator, record: DHTRecord) -> bool:
    """A validator that raises on hostile bytes refuses the record, not the whole reply."""
    try:
        return bool(validator.validate(record))
    except Exception:  # noqa: BLE001 - one crafted record must not cost the rest of the reply
        log.debug("record validator raised on a record; refused", exc_info=True)
        return False


def _validate_dictionary(self: DHTProtocol, key_bytes: bytes, dictionary: DictionaryDHTValue) -> bool:
    """Drop the subkeys the validator refuses (in place) and keep the rest. False only if there
    were subkeys and none was valid (what the original answered for any refused one)."""
    if self.record_validator is None:
        return True
    with dictionary.freeze():  # as the original: judge every stored subkey, expired or not
        items = list(dictionary.items())
        refused = [subkey for subkey, (value_bytes, expiration_time) in items
                   if not _valid(self.record_validator,
                                 DHTRecord(key_bytes, self.serializer.dumps(subkey), value_bytes, expiration_time))]
        if not refused:
            return True
        for subkey in refused:
            del dictionary[subkey]
        # A refused record must not keep the dictionary alive: the latest expiration is the kept one's.
        dictionary.latest_expiration_time = max(
            (expiration_time for _, (_, expiration_time) in dictionary.items()), default=float("-inf"))
        dictionary.refused_subkeys = len(refused)  # read by call_find below
        return len(refused) < len(items)


def _wrap_call_find(original):
    @functools.wraps(original)
    async def call_find(self, peer, keys):
        output = await original(self, peer, keys)
        horizon = timed_storage.get_dht_time() + MAX_REPLY_TTL_S
        for key, (maybe_value, nearest) in (output or {}).items():
            if maybe_value is None or not isinstance(maybe_value.value, DictionaryDHTValue):
                continue
            if len(maybe_value.value) == 0:  # an empty dictionary is nothing found, not an answer
                output[key] = None, nearest
                continue
            # The replica reports the key's expiration itself: it may be a refused subkey's, or a
            # lie (inf ends every lookup at once, and the reader caches the reply that long). Never
            # later than the latest subkey kept, nor than any record may live.
            expiration = min(maybe_value.expiration_time, maybe_value.value.latest_expiration_time, horizon)
            output[key] = ValueWithExpiration(maybe_value.value, expiration), nearest
        return output

    return call_find


# ---- 2. a refused store leaves the expiry heap alone -----------------------------------------


def _store(self: TimedStorage, key, value, expiration_time) -> bool:
    """hivemind 1.1.12's ``TimedStorage.store``, with the heap updated only once the store is
    accepted (the original pushed the offered expiration first, so a refused older store
    scheduled the current value's deletion at the older time)."""
    # the module global, read at call time as the original does (tests move that clock)
    if not math.isfinite(expiration_time):
        return False  # NaN passes every "expires too late" comparison and would never expire
    if expiration_time < timed_storage.get_dht_time() and not self.frozen:
        return False
    if key in self.data and self.data[key].expiration_time >= expiration_time:
        return False  # the current value is newer (or as new): refused, its expiry unchanged
    self.key_to_heap[key] = HeapEntry(expiration_time, key)
    heapq.heappush(self.expiration_heap, self.key_to_heap[key])
    replaced = key in self.data
    self.data[key] = ValueWithExpiration(value, expiration_time)
    if not replaced:  # as the original: only a new key may push the storage over maxsize
        self._remove_outdated()
    return True


# ---- 3. a finished lookup leaves no key behind ------------------------------------------------


def _reuse_finished_search_result(self: DHTNode, finished) -> None:
    """hivemind 1.1.12's ``DHTNode._reuse_finished_search_result`` (hand a finished lookup's
    answer to the concurrent lookups of its key that it satisfies), which also drops the key
    once no lookup of it is pending (the original left an empty set under every key ever
    looked up, and re-created one for a late callback)."""
    pending_requests = self.pending_get_requests.get(finished.key_id)
    if pending_requests is None:  # already answered and dropped: nothing pends on this key
        return
    if finished.found_something:
        search_result = ValueWithExpiration(finished.binary_value, finished.expiration_time)
        expiration_time_threshold = max(finished.expiration_time, finished.sufficient_expiration_time)
        # note: pending_requests is sorted in the order of descending sufficient_expiration_time
        while pending_requests and expiration_time_threshold >= pending_requests[-1].sufficient_expiration_time:
            pending_requests[-1].add_candidate(search_result, source_node_id=finished.source_node_id)
            pending_requests[-1].finish_search()
            pending_requests.pop()
    else:
        pending_requests.discard(finished)
    if not pending_requests:
        del self.pending_get_requests[finished.key_id]


# ---- applying ----------------------------------------------------------------------------------

# (owner class, method, its parameters in 1.1.12, how to build the replacement from the original)
_PATCHES = [
    (DHTProtocol, "_validate_dictionary", ["self", "key_bytes", "dictionary"],
     lambda _: _validate_dictionary),
    (DHTProtocol, "call_find", ["self", "peer", "keys"], _wrap_call_find),
    (TimedStorage, "store", ["self", "key", "value", "expiration_time"], lambda _: _store),
    (DHTNode, "_reuse_finished_search_result", ["self", "finished"], lambda _: _reuse_finished_search_result),
]
# call_find only fixes the expiration for what _validate_dictionary kept: the two go together.
_TOGETHER = {"DHTProtocol._validate_dictionary", "DHTProtocol.call_find"}


def _hivemind_version() -> str:
    try:
        return version("hivemind")
    except PackageNotFoundError:
        return "unknown"


def apply() -> set[str]:
    """Patch hivemind's classes (once per process); returns the names of the patches in effect."""
    global _applied
    if _applied:
        return APPLIED
    _applied = True
    installed = _hivemind_version()
    checked = installed == WRITTEN_FOR
    plan = []
    for owner, name, params, make in _PATCHES:
        qualname = f"{owner.__name__}.{name}"
        original = owner.__dict__.get(name)
        if not checked and (original is None or list(inspect.signature(original).parameters) != params):
            log.warning("hivemind %s: %s is not the method these patches were written for (hivemind %s); "
                        "not patching it", installed, qualname, WRITTEN_FOR)
            continue
        plan.append((owner, name, qualname, original, make))
    if not _TOGETHER <= {qualname for _, _, qualname, _, _ in plan}:
        log.warning("hivemind %s: not patching %s either (it needs the patch above)", installed,
                    " and ".join(p[2] for p in plan if p[2] in _TOGETHER) or "nothing")
        plan = [p for p in plan if p[2] not in _TOGETHER]
    for owner, name, qualname, original, make in plan:
        ORIGINALS[qualname] = original
        setattr(owner, name, make(original))
        APPLIED.add(qualname)
    if not checked:
        log.warning("hivemind %s (patches written for %s): applied %s", installed, WRITTEN_FOR,
                    sorted(APPLIED) or "none")
    return APPLIED


apply()
