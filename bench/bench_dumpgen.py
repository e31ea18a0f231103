"""The dump generator's speed (``refactx_testing.dumpgen``, docs/scale.md "The dump generator").

Generates a dump of ``--lines`` lines (default 1,000,000) into a temporary folder (or
``--keep DIR``) with ``--workers`` processes and prints: wall seconds, the workers' CPU
seconds split into rendering (numpy, the text) and bz2 compression, lines/s, uncompressed
MB/s, the bz2 size, items and the upper bound of the facts the pipeline's default
configuration keeps. CPU seconds do not depend on how busy the machine is; on a quiet
machine the wall time is about (render + bz2) / workers plus a second or two of start-up.
``--rounds`` repeats the run and keeps the fastest wall time. ``--measure`` also prints the
generated dump's measured shape (the same measures as ``python -m refactx_testing.dumpgen
--measure`` on the real extracts).

    .venv/bin/python bench/bench_dumpgen.py [--lines 1000000] [--workers 2] [--skew-facts 0] \\
        [--line-mix dense|real] [--preset dense|realistic] [--rounds 1] [--keep DIR] [--measure] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def run_once(out: Path, args: argparse.Namespace) -> dict:
    from refactx_testing import dumpgen

    if out.exists():
        shutil.rmtree(out)
    started = time.monotonic()
    manifest = dumpgen.generate(out, lines=args.lines, seed=args.seed, skew_facts=args.skew_facts,
                                line_mix=args.line_mix, workers=args.workers, preset=args.preset)
    wall = time.monotonic() - started
    timing = dumpgen.last_run()
    size = sum(f.stat().st_size for f in out.iterdir())
    return {
        "wall_s": round(wall, 2),
        "cpu_render_s": round(timing["cpu_render_s"], 2),
        "cpu_bz2_s": round(timing["cpu_bz2_s"], 2),
        "workers": timing["workers"],
        "compressor": manifest["compressor"],
        "preset": manifest["preset"],
        "lines": manifest["lines"],
        "lines_per_s": round(manifest["lines"] / wall),
        "uncompressed_mb": round(timing["bytes"] / 1e6, 1),
        "mb_per_s": round(timing["bytes"] / 1e6 / wall, 1),
        "files_mb": round(size / 1e6, 1),
        "items": manifest["items"],
        "facts_at_most": manifest["expected"]["facts_at_most"],
        "facts_per_line": round(manifest["expected"]["facts_at_most"] / manifest["lines"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skew-facts", type=int, default=0)
    parser.add_argument("--line-mix", default="dense", choices=["dense", "real"])
    parser.add_argument("--preset", default="dense", choices=["dense", "realistic"],
                        help="what texts and values are drawn from (docs/scale.md, \"The realistic preset\")")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--keep", help="write the dump here (kept) instead of a temporary folder")
    parser.add_argument("--measure", action="store_true", help="print the generated dump's shape too")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory(prefix="bench_dumpgen") as tmp:
        out = Path(args.keep) if args.keep else Path(tmp) / "dump"
        runs = [run_once(out, args) for _ in range(args.rounds)]
        best = min(runs, key=lambda r: r["wall_s"])
        result = {"args": vars(args), "best": best, "runs": runs, "cpu_count": os.cpu_count(),
                  "load_avg": os.getloadavg()}
        if args.measure:
            from refactx_testing import dumpgen

            result["shape"] = dumpgen.measure_dump(out)
    b = best
    print(f"dumpgen: {b['lines']:,} lines ({b['uncompressed_mb']} MB, {b['files_mb']} MB on disk) in "
          f"{b['wall_s']} s wall with {b['workers']} workers: {b['lines_per_s']:,} lines/s, {b['mb_per_s']} MB/s")
    print(f"  workers' CPU: {b['cpu_render_s']} s rendering + {b['cpu_bz2_s']} s bz2 ({b['compressor']}); "
          f"load average {result['load_avg'][0]:.1f} on {result['cpu_count']} CPUs")
    print(f"  {b['items']:,} items, at most {b['facts_at_most']:,} facts ({b['facts_per_line']} per line)")
    if args.measure:
        print(json.dumps(result["shape"], indent=2, ensure_ascii=False))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
