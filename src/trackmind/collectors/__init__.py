"""The collectors: processes that race the game with the latest weights and ship every race.

One CollectorPool protocol (protocol.py) with two implementations side by side: local
collector processes on this machine (local_pool.py, local_process.py, shared_handles.py and
the optional inference_server.py) and the Ray rollout fleet (fleet/). Both build their
races, networks and policies from the run's CollectorSpec (spec.py, parts.py).
"""
