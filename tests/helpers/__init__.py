"""Helpers the tests share (imported as ``tests.helpers.<module>``; the repository root is on
pytest's ``pythonpath``, see pyproject.toml):

    paths.py          ROOT, the repository root
    wait.py           wait_until: wait on a condition, never on a sleep
    procs.py          Procs: ``swarm-node`` child processes, their metrics and status
    swarm_helpers.py  in-process nodes on a MemoryHub (create_node, run_all, swarm_cfg)
    mqtt_fixtures.py  a real mosquitto per module, certificates, identities
    tls_certs.py      a throwaway CA and certificates for the MQTT TLS listener
    follower_proc.py  a broadcast follower run as its own process (killed mid-transfer)
    fake_registry.py  a stand-in registry model (a wheel built here, served to the real pip) and
                      one process asking for it (killed mid-build, or two at once)
    broadcast_net.py  a broadcast source and followers on an in-memory hub (Net)
    netns.py          NatNet: network namespaces behind masquerading routers (the NAT tests)
    nat_fixtures.py   the NAT tests' fixtures (a torn-down NatNet, nodes started inside it); not a
                      conftest.py: a second one would shadow tests/conftest.py's ``import conftest``
"""
