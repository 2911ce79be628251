"""The private-cluster carrier: MQTT 5 through one broker, in one folder.

    transport.py      MqttTransport: rollouts as retained messages, heartbeats
    link.py           the connection to the broker, with reconnect
    url.py            the broker URL (mqtt:// and mqtts://) and its checks
    parts.py          large retained bodies in parts
    carrier.py        the weight broadcast's request/reply over topics
    directory.py      the weight broadcast's manifest directory (retained)
    broker.py         a local Mosquitto started with a generated configuration (``swarm-node sim
                  --transport mqtt``, tests, benchmarks)
    settings.py       the transport's arguments from the ``[swarm]`` config
"""
