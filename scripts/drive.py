"""The scripted driver on maps (trackmind/commands/drive.py; trackmind-drive)."""

import sys

from trackmind.commands.drive import main

if __name__ == "__main__":
    sys.exit(main())
