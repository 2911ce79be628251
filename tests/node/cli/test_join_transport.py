"""join's carrier, inferred from what the user named: node/cli/train.py's ``join_transport``."""

from __future__ import annotations

import pytest

from swarm_node.node.cli.train import join_transport


@pytest.mark.parametrize("flag, overrides, file_swarm, expected", [
    (None, {}, {}, "hivemind"),  # nothing named: the public swarm
    ("libp2p", {"swarm.transport": "mqtt"}, {"transport": "mqtt"}, "libp2p"),  # --transport first
    (None, {"swarm.transport": "libp2p"}, {"transport": "mqtt"}, "libp2p"),  # then --swarm.transport
    (None, {}, {"transport": "mqtt"}, "mqtt"),  # then the config file's
    (None, {"swarm.broker": "mqtt://h"}, {}, "mqtt"),  # a broker named (--broker or --swarm.broker) ...
    (None, {}, {"broker": "mqtt://h"}, "mqtt"),  # ... or in the file: mqtt
    (None, {"swarm.transport": "memory"}, {}, "hivemind"),  # one join cannot use is inferred past
    (None, {"swarm.transport": "memory", "swarm.broker": "mqtt://h"}, {}, "mqtt"),
    ("hivemind", {"swarm.broker": "mqtt://h"}, {}, "hivemind"),  # a transport named wins over a broker
])
def test_join_transport_takes_the_first_named_else_infers_it_from_a_broker(flag, overrides, file_swarm, expected):
    assert join_transport(flag, overrides, file_swarm) == expected
