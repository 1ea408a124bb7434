"""The console scripts (`trackmind-train`, `trackmind-evaluate`, `trackmind-drive`).

They live in the package, so that a wheel installed with pip can train with no clone: the
Hydra config groups ship with it as `trackmind.conf`. scripts/*.py run the same functions.
"""
