"""``python -m swarm_node.node.cli``: the ``swarm-node`` command."""

import sys

from swarm_node.node.cli import main

if __name__ == "__main__":  # (importing this module runs nothing: tests/test_imports.py imports every module)
    sys.exit(main())
