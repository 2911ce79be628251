"""Error hierarchy and messages of the rewards package."""

from swarm_node.protocol.errors import SwarmError
from swarm_node.rewards.errors import InvalidRewardConfig, InvalidTaskId, TaskError, UnknownTaskFamily


def test_hierarchy():
    assert issubclass(TaskError, SwarmError)
    for cls in (UnknownTaskFamily, InvalidTaskId, InvalidRewardConfig):
        assert issubclass(cls, TaskError)


def test_unknown_family_message_and_fields():
    error = UnknownTaskFamily("algebra", ["arithmetic", "lists"])
    assert str(error) == "unknown task family 'algebra'; known families: arithmetic, lists"
    assert error.family == "algebra"
    assert error.known == ("arithmetic", "lists")
