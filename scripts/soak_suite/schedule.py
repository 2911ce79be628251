"""The soak's schedule, scaled to its length: warm-up, kills, the partition, the bootstrap outage
and the attack phases between clean ones, as times from the nodes' launch; and the sim faults
file it becomes (node/sim/faults.py). Pure: no process, no clock.

At 60 minutes: a 10-minute warm-up; a node killed with SIGKILL every 5 minutes (minute 5 to 55,
each node once by minute 30, then two full nodes in turn so the other four live on to the end;
the restart with ``--resume`` 5 s later); a 2-minute partition at
minute 18 (the learner and its workers against the full nodes); the bootstrap peer stopped for
5 minutes from minute 33.75 (the node killed at minute 35 then rejoins through its peer cache:
that slot is given to a full node, whose cache holds the peers it trained on); after the
warm-up, an attack phase per attack set with a clean phase before and after each. Shorter runs
scale every time by ``minutes / 60``, but the first kill comes at 60 s at the earliest and the
next at least 40 s apart (a restart costs a model load however short the run), the partition
lasts at least 10 s and the outage 40 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ENVELOPE = "envelope"  # the name of the attack set node/sim/adversary's DEFAULT_ATTACKS
DEFAULT_ATTACK_SETS = (ENVELOPE, "flood", "shard_flood", "unknown_family", "unknown_family_flood")
DOWN_SECONDS = 5.0  # a killed node's restart comes this long after the kill
MIN_KILL_INTERVAL = 40.0
FIRST_KILL = 60.0  # the nodes load, join and write a first checkpoint before the first kill
LAST_KILL_BEFORE_END = 20.0  # a restarted node loads and resumes before the run ends
MIN_WINDOW = 10.0
MIN_OUTAGE = 40.0  # long enough for a restart to join while the bootstrap peer is away


@dataclass(frozen=True)
class Phase:
    name: str  # "clean" or the attack set's name
    start: float  # seconds from launch
    end: float
    attacks: tuple[str, ...] = ()  # empty: clean


@dataclass
class Schedule:
    seconds: float
    warm_up: float
    kills: list[tuple[int, float]]  # (node, seconds from launch)
    partition: tuple[float, float, list[list[int]]]  # (start, end, groups)
    outage: tuple[float, float]
    phases: list[Phase]
    skipped: list[str] = field(default_factory=list)  # attack sets the registry does not have

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "warm_up_s": self.warm_up, "kills": self.kills, "partition": list(self.partition),
                "outage": list(self.outage), "phases": [vars(p) for p in self.phases], "skipped": self.skipped}

    @classmethod
    def from_dict(cls, d: dict) -> "Schedule":
        return cls(d["seconds"], d["warm_up_s"], [tuple(k) for k in d["kills"]], tuple(d["partition"]),
                   tuple(d["outage"]), [Phase(p["name"], p["start"], p["end"], tuple(p["attacks"])) for p in d["phases"]],
                   d["skipped"])

    def disturbed(self) -> list[tuple[float, float]]:
        """The windows delivery is not measured in: the partition's and the outage's."""
        return [self.partition[:2], self.outage]


def attack_sets(names: list[str], registry: tuple[str, ...], envelope: tuple[str, ...]) -> tuple[list, list]:
    """([(name, attacks)], skipped names): ``envelope`` stands for the envelope attacks; a name the
    adversary registry (``registry``) does not hold is skipped, not an error (attacks are added
    to the registry over time)."""
    out, skipped = [], []
    for n in names:
        if n == ENVELOPE:
            out.append((n, tuple(envelope)))
        elif n in registry:
            out.append((n, (n,)))
        else:
            skipped.append(n)
    return out, skipped


CHURN_NODES = 2  # after every node was killed once, the later kills take the last two full nodes in turn


def kill_order(nodes: int, workers: int, kills: int, outage_slot: int | None) -> list[int]:
    """Which node each kill takes: every node once, from the last full node down; after that
    the last ``CHURN_NODES`` full nodes in turn, so the other nodes' processes live on to the end
    (a night-long process's memory is judged over most of the run, not a few minutes). The kill
    during the bootstrap outage (``outage_slot``) takes a full node (a worker's peer cache is
    empty: it trains on nobody's groups)."""
    full = list(range(workers + 1, nodes))
    churn = full[-CHURN_NODES:] or list(range(nodes))
    order = [(nodes - 1 - k) % nodes for k in range(min(kills, nodes))]
    order += [churn[k % len(churn)] for k in range(kills - len(order))]
    if outage_slot is not None and full and order[outage_slot] not in full:
        swap = next((k for k in range(outage_slot + 1, kills) if order[k] in full), None)
        if swap is None:
            swap = next(k for k in range(outage_slot - 1, -1, -1) if order[k] in full)
        order[outage_slot], order[swap] = order[swap], order[outage_slot]
    return order


def make_schedule(minutes: float, nodes: int, workers: int, sets: list[tuple[str, tuple[str, ...]]],
                  skipped: list[str] | None = None) -> Schedule:
    d = minutes * 60.0
    f = minutes / 60.0
    warm_up = d / 6
    interval = max(300 * f, MIN_KILL_INTERVAL)
    times = []
    t = max(interval, FIRST_KILL)
    while t <= d - max(interval / 2, LAST_KILL_BEFORE_END):
        times.append(t)
        t += interval
    p_len = max(120 * f, MIN_WINDOW)
    partition_at = 0.3 * d
    side = list(range(workers + 1)) if workers + 1 < nodes else list(range(nodes // 2))
    partition = (partition_at, partition_at + p_len, [side, [i for i in range(nodes) if i not in side]])
    # The outage begins a quarter of its length before a kill near 55% of the run, so that node's
    # restart (5 s down, ~10 s to load) joins while the bootstrap peer is still away.
    o_len = max(300 * f, MIN_OUTAGE)
    target = 0.55 * d + o_len / 4
    slot = min(range(len(times)), key=lambda k: abs(times[k] - target)) if times else None
    at = times[slot] - o_len / 4 if slot is not None else 0.55 * d
    outage = (at, at + o_len)
    kills = list(zip(kill_order(nodes, workers, len(times), slot), times))
    phases = []
    n_slots = 2 * len(sets) + 1
    length = (d - warm_up) / n_slots
    for k in range(n_slots):
        start, end = warm_up + k * length, warm_up + (k + 1) * length
        if k % 2:
            name, attacks = sets[k // 2]
            phases.append(Phase(name, start, end, attacks))
        else:
            phases.append(Phase("clean", start, end))
    return Schedule(d, warm_up, kills, partition, outage, phases, list(skipped or []))


def faults_of(s: Schedule) -> dict:
    """The schedule as a sim faults file's content (SimFaults.model_validate takes it)."""
    return {
        "kill": [{"node": n, "at_seconds": t, "down_seconds": DOWN_SECONDS} for n, t in s.kills],
        "partition": [{"groups": s.partition[2], "after_seconds": s.partition[0],
                       "duration_seconds": s.partition[1] - s.partition[0]}],
        "bootstrap_outage": [{"after_seconds": s.outage[0], "duration_seconds": s.outage[1] - s.outage[0]}],
        "malicious": [{"attacks": list(p.attacks), "after_seconds": p.start, "duration_seconds": p.end - p.start}
                      for p in s.phases if p.attacks],
    }
