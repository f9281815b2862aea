"""Regenerate the sympy derivation of the reduced K-mixture dynamics.

    python derivations/mixture.py [--K 2 --L 3] [--format latex json python] [--out DIR]

writes ``DIR/mixture_K{K}_L{L}.{tex,json,py}`` (default DIR: derivations/generated)
through :func:`meanfield.models.mixture.symbolic.write`. The committed files are checked
to be current by ``tests/test_mixture_symbolic.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from meanfield.models.mixture import symbolic  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--K", type=int, default=2, help="number of groups (>= 2); default 2")
    ap.add_argument("--L", type=int, default=3, help="tokens per sample (>= 2); default 3")
    ap.add_argument("--format", nargs="+", choices=symbolic.FORMATS, default=list(symbolic.FORMATS),
                    help="formats to write; default all")
    ap.add_argument("--out", type=Path, default=HERE / "generated", help="output folder")
    args = ap.parse_args(argv)
    for fmt in args.format:
        t = time.perf_counter()
        path = symbolic.write(args.K, args.L, fmt, args.out)
        print(f"{path}  ({time.perf_counter() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
