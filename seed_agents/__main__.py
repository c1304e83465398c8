"""``python -m seed_agents ...`` is the same as the ``seed-envs`` command."""
import sys

from seed_agents.cli import main

sys.exit(main())
