"""``python -m refactx_testing.dumpgen``: generate a dump, or measure one."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Sequence

from refactx_testing.dumpgen.shape import DEFAULT_CHUNK_LINES, HOT_LABEL, LINE_MIXES, PRESETS
from refactx_testing.dumpgen.measure import measure, measure_dump
from refactx_testing.dumpgen.generate import COMPRESSORS, generate
from refactx_testing.dumpgen.nextweek import nextweek


# ====================================================================== CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m refactx_testing.dumpgen",
        description="Write a realistic, seeded Wikidata truthy dump (.nt.bz2) with matching enwiki "
                    "page/page_props SQL dumps (.sql.gz) into OUT, for benchmarks and tests; or, "
                    "with --measure, print the distributions it is modelled on.",
        epilog="Examples:\n"
               "  python -m refactx_testing.dumpgen build/dump-1m --lines 1000000\n"
               "  python -m refactx_testing.dumpgen build/dump-skew --lines 12000000 --skew-facts 1000000\n"
               "  python -m refactx_testing.dumpgen build/dump-real --lines 3000000 --preset realistic\n"
               "  python -m refactx_testing.dumpgen --measure --shared ../shared/data\n"
               "  python -m refactx_testing.dumpgen --measure --dump build/dump-1m\n"
               "  python -m refactx_testing.dumpgen build/dump-1m-next --next-week-of build/dump-1m --share 0.01\n"
               "Same seed, lines, skew, line mix, preset, chunk size and compressor: identical bytes (any --workers).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", help="output folder (created; files in it are replaced)")
    parser.add_argument("--lines", type=int, default=1_000_000,
                        help="about this many N-Triples lines (default 1,000,000; the manifest has the exact count)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--skew-facts", type=int, default=0,
                        help=f"add articles labelled '{HOT_LABEL} ...' until at least this many facts lie "
                             "below that one label prefix (default 0: none)")
    parser.add_argument("--line-mix", choices=sorted(LINE_MIXES), default="dense",
                        help="dense (default): few skipped lines, ~0.33 facts per line; real: the full dump's "
                             "per-entity metadata and many languages, ~0.12 facts per line")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="dense",
                        help="what labels and descriptions are drawn from. dense (default): short word "
                             "lists (~200 title words, ~300 names). realistic: 80,000 title words and "
                             "66,000 names behind those lists, shorter titles: a vocabulary that keeps "
                             "growing with the dump. The same items as dense, within a few lines. Its "
                             "facts' zstd floor of texts (bench/bench_realism.py) is within 6%% of dense's; "
                             "docs/scale.md, 'The realistic preset'. wikidata: realistic's words, most "
                             "items with a few statements, labels sharing their first word, homonyms told "
                             "apart by description (docs/scale.md, 'The wikidata preset')")
    parser.add_argument("--chunk-lines", type=int, default=DEFAULT_CHUNK_LINES,
                        help=f"lines per bz2 stream and task (default {DEFAULT_CHUNK_LINES:,}; part of the seed)")
    parser.add_argument("--workers", type=int, default=0, help="processes (default: every usable CPU)")
    parser.add_argument("--compressor", default="auto", choices=["auto", *COMPRESSORS],
                        help="bz2 compressor: auto (default) takes lbzip2 or pbzip2 when on PATH, else python")
    parser.add_argument("--measure", action="store_true",
                        help="print the measured distributions (JSON) instead of generating")
    parser.add_argument("--shared", default=str(Path.cwd().parent / "shared" / "data"),
                        help="with --measure: the real extracts (default ../shared/data)")
    parser.add_argument("--dump", help="with --measure: a generated dump's folder, measured the same way")
    parser.add_argument("--next-week-of", metavar="FIRST",
                        help="write into OUT the next week of the dump in folder FIRST: --share of its items "
                             "edited (statements, labels, descriptions), deleted or created, by --seed; "
                             "edits.tsv.gz and the manifest's 'nextweek' say what changed")
    parser.add_argument("--share", type=float, default=0.01,
                        help="with --next-week-of: the share of the items edited (default 0.01)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    if args.measure:
        result = measure_dump(args.dump) if args.dump else measure(args.shared)
        sys.stdout.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        return 0
    if not args.out:
        parser.error("OUT is required (or --measure)")
    if args.next_week_of:
        try:
            manifest = nextweek(args.next_week_of, args.out, share=args.share, seed=args.seed,
                                chunk_lines=args.chunk_lines, compressor=args.compressor)
        except (ValueError, OSError) as exc:
            parser.error(str(exc))
        sys.stdout.write(json.dumps(manifest["nextweek"], indent=2) + "\n")
        return 0
    try:
        manifest = generate(args.out, args.lines, seed=args.seed, skew_facts=args.skew_facts,
                            line_mix=args.line_mix, chunk_lines=args.chunk_lines, workers=args.workers or None,
                            compressor=args.compressor, preset=args.preset)
    except ValueError as exc:
        parser.error(str(exc))
    summary = {k: manifest[k] for k in ("preset", "lines", "items", "statements", "statements_per_item",
                                         "statements_by_datatype", "hostile_lines", "hot_label")}
