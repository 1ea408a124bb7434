"""Write a closed racing circuit, or a long grand-prix line, as a map CSV, seeded.

    python scripts/make_circuit.py --seed 1 --length 4500 --width 9 --out maps/circuit.csv
    python scripts/make_circuit.py --grandprix --seed 202 --length 5000 \
        --out maps/grandprix_long.csv

The circuit (trackmind.sim.maps.circuit_line) is a smooth loop whose last row lies one step
before its first, as circuit CSVs usually end; the importer closes it into a circuit. With
--grandprix the line is an open grand-prix map (trackmind.sim.maps.grandprix_map: straights
into hairpins and chicanes) of about --length metres, a row every 4 m, with its own width.
The CSV layout is x,y,width_right,width_left.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trackmind.cli import OneLineParser, positive_float
from trackmind.sim.mapio import import_csv
from trackmind.sim.maps import circuit_line, grandprix_map
from trackmind.sim.track import MapError


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--length", type=positive_float(), default=4500.0, help="lap length, metres")
    ap.add_argument("--width", type=positive_float(), default=9.0, help="half-width, metres")
    ap.add_argument("--out", default="maps/circuit.csv")
    ap.add_argument("--grandprix", action="store_true", help="an open grand-prix line instead")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    kind = "grand-prix line" if args.grandprix else "circuit"
    header = f"# {kind} seed {args.seed}, {args.length:g} m (scripts/make_circuit.py)"
    header += "\nx,y,w_right,w_left"
    if args.grandprix:
        track = grandprix_map(args.seed, args.length)
        keep = slice(None, None, 2)  # the recipe's 2 m points, one in two
        widths = zip(track.race_width_right[keep], track.race_width_left[keep])
        line = track.race_line[keep]
        rows = [f"{x:.2f},{y:.2f},{r:g},{lw:g}" for (x, y), (r, lw) in zip(line, widths)]
    else:
        line = circuit_line(args.seed, args.length)
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
