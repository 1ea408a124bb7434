"""Greedy races of a trained agent (trackmind/commands/evaluate.py; trackmind-evaluate)."""

import sys

from trackmind.commands.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
