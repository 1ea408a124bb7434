"""Record a run's positions from the game through TMInterface (input of make_map_from_run.py).

    python scripts/record_run.py run.npy                        # server TMInterface0
    python scripts/record_run.py run.npy --server TMInterface1 --timeout 900
    python scripts/record_run.py run.npy --standin hairpins     # a stand-in game, driven
                                                                # by the scripted driver

Start the recorder, then drive the map to the finish in the game (or validate a replay of
it): the car's position at every physics step from race time 0 to the finish is saved as
an (N, 3) .npy of game coordinates (x, y, z; y up). A restarted race starts the recording
over. Exit status 2 with one line when no game answers or no run finishes in time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from trackmind.cli import OneLineParser, positive_float


def standin_player(map_spec: str):
    """A stand-in game whose 'human' is the scripted driver (a demo without the game)."""
    from trackmind.sim.driver import PurePursuitDriver
    from trackmind.sim.mapio import load_map

    driver = PurePursuitDriver([load_map(map_spec)], action_ms=10)
    return lambda car: int(driver.act(car)[0])


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="where to write the run (.npy)")
    ap.add_argument("--server", default="TMInterface0", help="TMInterface server name")
    ap.add_argument(
        "--timeout", type=positive_float(), default=600.0, help="seconds to wait for a finish"
    )
    ap.add_argument("--connect-timeout", type=positive_float(), default=10.0)
    ap.add_argument("--standin", metavar="MAP", help="record a stand-in game on this sim map")
    args = ap.parse_args(argv)

    from trackmind.sim.track import MapError
    from trackmind.tmi.connection import GameUnavailable, standin_factory, tminterface_factory
    from trackmind.tmi.record import record_run

    out = Path(args.out)
    if out.suffix != ".npy":
        print(f"error: {out}: the run is written as .npy", file=sys.stderr)
        return 2
    try:
        if args.standin:
            from trackmind.tmi.standin import start_standin, stop_standin

            player = standin_player(args.standin)
            start_standin(args.server, map_spec=args.standin, frame_shape=None, player=player)
            make_iface = standin_factory()
        else:
            make_iface = tminterface_factory()
        print(f"waiting on {args.server}: drive the map to the finish", flush=True)
        run = record_run(make_iface, args.server, args.timeout, args.connect_timeout)
    except (GameUnavailable, TimeoutError, MapError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if args.standin:
            stop_standin(args.server)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, run.positions)
    length = float(np.sum(np.linalg.norm(np.diff(run.positions, axis=0), axis=1)))
    print(
        f"{out}: {len(run.positions)} positions, {length:.0f} m driven, "
        f"finish {run.finish_time_ms / 1000:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
