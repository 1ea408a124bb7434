"""Choose a run's checkpoint on held-out maps (trackmind/commands/choose.py; trackmind-choose)."""

import sys

from trackmind.commands.choose import main

if __name__ == "__main__":
    sys.exit(main())
