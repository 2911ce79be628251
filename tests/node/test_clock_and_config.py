"""Rounds from the shared clock, and the [swarm] config section."""

from __future__ import annotations

import asyncio
import time

import pytest

from swarm_node.node.clock import RoundClock
from swarm_node.node.config.config import load_config
from swarm_node.node.errors import ConfigError


def test_rounds_are_a_pure_function_of_time():
    c = RoundClock(5.0, epoch=100.0)
    assert c.round_at(100.0) == 0
    assert c.round_at(104.999) == 0
    assert c.round_at(105.0) == 1
    assert c.round_at(50.0) == 0  # before the epoch: round 0, never negative
    assert c.start_of(3) == 115.0 and c.end_of(3) == 120.0
    # Two nodes started at different times agree on the round at any instant.
    assert RoundClock(5.0, epoch=100.0).round_at(1234.5) == c.round_at(1234.5) == 226


def test_a_node_that_fell_behind_joins_the_current_round():
    t = [1000.0]
    c = RoundClock(2.0, now=lambda: t[0])
    r0 = c.current()
    t[0] += 7.3  # a long stall: three and a half rounds
    assert c.current() == r0 + 3  # not r0 + 1: no drifting


def test_wait_for_sleeps_until_the_round_starts():
    c = RoundClock(0.2)
    target = c.current() + 1
    asyncio.run(c.wait_for(target))
    assert c.current() >= target
    assert time.time() >= c.start_of(target)


def test_bad_round_length():
    with pytest.raises(ValueError):
        RoundClock(0)


def test_swarm_config_defaults_are_sapo_4_of_8():
    cfg = load_config(None, {"swarm.transport": "memory"})
    assert cfg.generation.prompts_per_step == 8 and cfg.swarm.external_groups == 4
    assert cfg.local_groups == 4
    assert load_config(None, {}).local_groups == 8  # alone, every group is local


def test_swarm_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="external_groups"):
        load_config(None, {"swarm.transport": "memory", "swarm.external_groups": 8})
    with pytest.raises(ConfigError, match="/p2p/"):
        load_config(None, {"swarm.initial_peers": ["/ip4/1.2.3.4/tcp/31337"]})
    with pytest.raises(ConfigError, match="swarm.transport"):
        load_config(None, {"swarm.transport": "carrier-pigeon"})
    with pytest.raises(ConfigError, match="swarm.name"):
        load_config(None, {"swarm.name": "has space"})
