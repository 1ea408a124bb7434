"""Train an IQN agent (see trackmind/commands/train.py; the console script trackmind-train)."""

from trackmind.commands.train import cli

if __name__ == "__main__":
    cli()
