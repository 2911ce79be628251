"""A verified history given to a publisher in a test, as the node earns it: envelopes admitted in
3 of the receiver's rounds (node/transport/standing.py), one envelope being no longer enough."""

from swarm_node.node.transport.standing import VOUCH_ROUNDS


def give_standing(transport, publisher: str) -> None:
    """``publisher`` vouched at hivemind ``transport``, as if the node had admitted its envelopes in
    its rounds 0..3 (vouched as the 4th began)."""
    for now in range(VOUCH_ROUNDS + 1):
        transport._fetcher.admitted(publisher, now, now)
    assert publisher in transport._fetcher.known
