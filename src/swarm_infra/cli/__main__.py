"""``python -m swarm_infra.cli``: the ``swarm`` command."""

import sys

from . import main

sys.exit(main())
