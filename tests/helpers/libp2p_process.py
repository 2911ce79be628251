"""Where the libp2p tests live and how their own pytest process is told apart (py-libp2p and
hivemind cannot share a process: both register the protobuf symbol ``crypto.pb.KeyType``)."""

from tests.helpers.paths import ROOT

LIBP2P_TESTS = ROOT / "tests" / "node" / "transport" / "libp2p"
IN_LIBP2P_PROCESS = "SWARM_NODE_LIBP2P_PROCESS"  # set by tests/node/transport/test_libp2p_suite.py
