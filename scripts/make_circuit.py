"""Write a closed racing circuit as a map CSV (x,y,width_right,width_left), seeded.

    python scripts/make_circuit.py --seed 1 --length 4500 --width 9 --out maps/circuit.csv

The circuit (trackmind.sim.maps.circuit_line) is a smooth loop whose last row lies one step
before its first, as circuit CSVs usually end; the importer closes it into a circuit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trackmind.cli import OneLineParser, positive_float
from trackmind.sim.mapio import import_csv
from trackmind.sim.maps import circuit_line
from trackmind.sim.track import MapError


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--length", type=positive_float(), default=4500.0, help="lap length, metres")
    ap.add_argument("--width", type=positive_float(), default=9.0, help="half-width, metres")
    ap.add_argument("--out", default="maps/circuit.csv")
    args = ap.parse_args(argv)
    line = circuit_line(args.seed, args.length)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = f"# circuit seed {args.seed}, {args.length:g} m (scripts/make_circuit.py)"
    header += "\nx,y,w_right,w_left"
    rows = [f"{x:.2f},{y:.2f},{args.width:g},{args.width:g}" for x, y in line]
    out.write_text("\n".join([header, *rows]) + "\n")
    try:
        track = import_csv(out)
    except MapError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}: {'circuit' if track.closed else 'open line'}, {track.length_m:.0f} m")
    return 0


if __name__ == "__main__":
    sys.exit(main())
