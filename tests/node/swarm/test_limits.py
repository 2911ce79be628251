"""The swarm's time rules, by hand: how long an envelope and a heartbeat stay published."""

from swarm_node.node.swarm.limits import envelope_ttl, heartbeat_ttl


def test_an_envelope_lives_the_readers_lag_plus_two_rounds():
    assert envelope_ttl(max_round_lag=4, round_seconds=1.5) == 9.0
    assert envelope_ttl(max_round_lag=0, round_seconds=2.0) == 4.0


def test_a_heartbeat_lives_three_rounds():
    assert heartbeat_ttl(1.0) == 3.0 and heartbeat_ttl(2.5) == 7.5
