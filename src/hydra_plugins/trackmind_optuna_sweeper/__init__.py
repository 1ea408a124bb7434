"""A Hydra sweeper over Optuna's ask/tell API (Optuna >= 4): `hydra/sweeper=trackmind_optuna`.

Hydra imports every public module of `hydra_plugins` at start-up, so the modules it scans
(this one, config.py, optuna_sweeper.py) import neither Optuna nor the search: those live in
_impl.py and _search_space.py and load when a sweep starts.
"""
