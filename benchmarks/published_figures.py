"""Published real-GPU memory figures beside the engine's: the whole table (issues 23 and 24).

Runs every row of :mod:`helpers.teaching.published` through the simulated
engine and prints, per row, the published figure, what it measures, the
engine's figure with tensors only ("before") and with the card's cuBLAS
workspaces ("after"), with the row's untraced lines where it has any, the
ratio, whether the engine is where the row expects it, and the gap explained;
then the wall time of each row.

On the project's two-core machine, quiet, the whole table takes about four
minutes: the BERT and ViT rows a second or so each, the 7-8B LoRA rows about
10 s, the QLoRA rows 30-50 s, the 65B QLoRA row about a minute.  The tests
(tests/test_published.py) run only fast rows.  Run with ``make benchmark-published`` or
``python benchmarks/published_figures.py [--only KEY ...] [--issue 23|24]``.
"""

import argparse
import sys
import textwrap
import time
import warnings

from helpers.teaching import published as P


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="row keys to run (default: all)")
    parser.add_argument("--issue", choices=("23", "24"), default=None,
                        help="only the rows of issue 23 (ENGINE_CHECKS) or 24 (PUBLISHED)")
    args = parser.parse_args()
    rows = {"23": P.ENGINE_CHECKS, "24": P.PUBLISHED}.get(args.issue, (*P.PUBLISHED, *P.ENGINE_CHECKS))
    if args.only:
        unknown = [k for k in args.only if k not in P.ROWS]
        if unknown:
            parser.error(f"unknown row {unknown[0]!r}; the rows are {', '.join(P.ROWS)}")
        rows = [r for r in rows if r.key in args.only]
    warnings.filterwarnings("ignore")
    done, times = [], {}
    for row in rows:
        start = time.perf_counter()
        done.append(P.compare(row))
        times[row.key] = time.perf_counter() - start
        print(f"{row.key}: {times[row.key]:.1f} s", file=sys.stderr, flush=True)
    print(P.comparison_table(done))
    print()
    for c in done:
        r = c.row
        lines = [f"{r.key}: published {r.published:,} B ({P.MEASURES[r.measured]}), engine before "
                 f"{c.before:,} B, after {c.after:,} B (cuBLAS workspaces {c.workspaces:,} B"
                 + (f"; {r.card}" if r.card else "; no card named") + ")"]
        if c.reserved is not None:
            lines.append(f"  allocated peak {c.allocated:,} B, reserved (allocator model) {c.reserved:,} B")
        if c.verdict is not None:
            card = r.card or f"a card of {r.published / 2**30:.0f} GiB"
            lines.append(f"  {c.verdict.sentence(card)}")
        where = "yes" if c.agrees else "NO"
        lines.append(f"  ratio {c.ratio:.3f}; expected {r.expected} {r.tolerance:.0%}: {where}; "
                     f"{times[r.key]:.1f} s")
        lines += textwrap.wrap("  gap: " + r.gap, 110, subsequent_indent="    ")
        print("\n".join(lines))
    return 0 if all(c.agrees for c in done) else 1


if __name__ == "__main__":
    sys.exit(main())
