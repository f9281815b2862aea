"""Regenerate the sympy derivation of the symmetry-reduced K-mixture dynamics.

    python derivations/mixture_symmetry.py [--K 2 --L 3] [--format latex json python] [--out DIR]

writes ``DIR/mixture_K{K}_L{L}_sym.{tex,json,py}`` (default DIR: derivations/generated)
through :func:`meanfield.models.mixture.symmetry_symbolic.write`: the symmetry group of the
default configuration (uniform p, infinite-width attention, zero neurons), the
orbit variables with their members and signs, and the closed flow / exact GD map
in orbit variables. The committed files are checked to be current by
``tests/test_mixture_symmetry.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from meanfield.models.mixture import symmetry_symbolic  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--K", type=int, default=2, help="number of groups (>= 2); default 2")
    ap.add_argument("--L", type=int, default=3, help="tokens per sample (>= 2); default 3")
    ap.add_argument("--format", nargs="+", choices=symmetry_symbolic.FORMATS,
                    default=list(symmetry_symbolic.FORMATS), help="formats to write; default all")
    ap.add_argument("--out", type=Path, default=HERE / "generated", help="output folder")
    args = ap.parse_args(argv)
    for fmt in args.format:
        t = time.perf_counter()
        path = symmetry_symbolic.write(args.K, args.L, fmt, args.out)
        print(f"{path}  ({time.perf_counter() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
