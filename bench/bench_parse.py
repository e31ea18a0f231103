"""Parse throughput on a multi-million-line .nt.bz2, beside plain bz2 decompression.

Builds the input by repeating a real dump extract with renumbered item ids and
writes it as bz2 in a temp dir. ``--template head`` (default) repeats the first
10,000 lines of the 2018 truthy dump: the line mix of a whole dump, where 81% of
the lines are terms in other languages and sitelink metadata that parsing counts
and skips. ``--template sample`` repeats the English-only 500-item extract, where
every line is a statement or an English term: the worst case for the staged write.
(A synthetic line mix stands in when ../shared is absent.) Then, in one process:

1. plain decompression, one core: Python's bz2 module (C libbz2) iterating lines;
2. Spark reading the file as text and counting lines: decompression and line
   splitting in the JVM, no column read (the baseline of every ratio);
3. Spark reading the lines as a string column into a no-op sink;
4. the parse stage's lex (``parse.lex_lines``: the JVM lexer, what ``parse.run``
   computes per line) into a no-op sink;
5. the lex plus ``parse.write_staged`` (statements, terms, property types and
   rejects to Parquet, skipped lines counted): the whole of the parse stage's
   first phase, the only one that reads every line;
6. optionally (--full) the whole parse stage with its Parquet outputs.

(2)-(5) run once to warm up (JIT, file listing), then in ``--rounds``
interleaved rounds, and the fastest run of each is printed: the machine is
shared, and interleaving spreads a busy spell over every figure alike. Lines/s
per core divide by the Spark cores used. Each ratio is a time over (2)'s.

    .venv/bin/python bench/bench_parse.py [--lines 2000000] [--template head|sample] [--cores 2] [--rounds 3] [--full]
"""

from __future__ import annotations

import argparse
import bz2
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WIKIDATA = Path(os.environ.get("REFACTX_SHARED", ROOT.parent / "shared")) / "data/wikidata"
TEMPLATES = {"head": WIKIDATA / "truthy-2018-head10k.nt", "sample": WIKIDATA / "truthy-2018-sample500-en.nt"}
QID = re.compile(rb"entity/Q(\d+)>")


def template_lines(template: str) -> list[bytes]:
    if TEMPLATES[template].exists():
        return TEMPLATES[template].read_bytes().splitlines()
    e, d = b"http://www.wikidata.org/entity/", b"http://www.wikidata.org/prop/direct/"
    return [
        b"<" + e + b"Q1> <" + d + b"P31> <" + e + b"Q5> .",
        b"<" + e + b'Q1> <http://www.w3.org/2000/01/rdf-schema#label> "Douglas Adams"@en .',
        b"<" + e + b'Q1> <http://schema.org/description> "English writer and humorist (1952\\u20132001)"@en .',
        b"<" + e + b'Q1> <http://www.w3.org/2000/01/rdf-schema#label> "Douglas Adams"@fr .',
        b"<" + e + b'Q1> <' + d + b'P569> "1952-03-11T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime> .',
    ]


def build_input(path: Path, lines: int, template_name: str = "head") -> int:
    """Write ``lines`` lines (the template repeated, item ids shifted per copy)."""
    template = template_lines(template_name)
    written, copy = 0, 0
    with bz2.open(path, "wb", compresslevel=9) as fh:
        while written < lines:
            shift = copy * 100_000_000
            chunk = template[: lines - written]
            body = b"\n".join(chunk) + b"\n"
            if copy:
                body = QID.sub(lambda m: b"entity/Q%d>" % (int(m.group(1)) + shift), body)
            fh.write(body)
            written += len(chunk)
            copy += 1
    return written


def bench_plain_bz2(path: Path) -> tuple[int, float]:
    started = time.perf_counter()
    n = 0
    with bz2.open(path, "rb") as fh:
        for _ in fh:
            n += 1
    return n, time.perf_counter() - started


def seconds(action) -> float:
    """Wall-clock seconds of one run of ``action``."""
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def noop(df):
    """An action that computes every column of ``df`` and writes nothing."""
    return lambda: df.write.format("noop").mode("overwrite").save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--template", choices=sorted(TEMPLATES), default="head",
                        help="head: a whole dump's line mix (default); sample: English-only, every line staged")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds (best is kept)")
    parser.add_argument("--full", action="store_true", help="also run the whole parse stage (Parquet outputs)")
    args = parser.parse_args()

    from refactx_pipeline.stages import parse
    from refactx_pipeline.common import spark_session
    from refactx_pipeline.config import Config
    from refactx_pipeline.stages.contract import StageContext

    with tempfile.TemporaryDirectory(prefix="bench_parse_") as tmp:
        dump = Path(tmp) / "truthy.nt.bz2"
        t = time.perf_counter()
        n = build_input(dump, args.lines, args.template)
        print(f"input: {n:,} lines from {TEMPLATES[args.template].name}, {dump.stat().st_size / 1e6:.1f} MB bz2, built in {time.perf_counter() - t:.1f}s")

        cfg = Config().updated({
            "paths.build_root": str(Path(tmp) / "build"),
            "spark.master": f"local[{args.cores}]",
            "spark.shuffle_partitions": args.cores * 2,
            # split the bz2 file into blocks so every core gets work
            "spark.conf": {"spark.sql.files.maxPartitionBytes": str(max(1 << 20, dump.stat().st_size // (args.cores * 4)))},
            "input.dumps": [str(dump)],
        })
        spark = spark_session(cfg, "bench_parse")

        n_plain, s_plain = bench_plain_bz2(dump)
        ens, dcs = cfg.input.entity_namespace, cfg.input.direct_claim_namespace
        lines = parse.read_dump_lines(spark, [str(dump)])
        staged = parse.lex_lines(lines, ["en"], ens, dcs)  # parse.run's per-line work
        staged_path = str(Path(tmp) / "_staged")
        actions = {
            # decompression and line splitting only: count() reads no column
            "read": lines.count,
            # the same, with every line turned into a string column (what parsing starts from)
            "lines": noop(lines.select("value")),
            "lex": noop(staged),
            # lex plus the staged Parquet write of parse.run, the whole of its first phase
            "lex_write": lambda: parse.write_staged(staged, staged_path),
        }
        for action in actions.values():  # warm-up: JIT for the generated code and the lexer, file listing
            action()
        # interleaved rounds, best kept, so that a busy spell on the shared machine hits every figure alike
        secs = {name: float("inf") for name in actions}
        for _ in range(args.rounds):
            for name, action in actions.items():
                secs[name] = min(secs[name], seconds(action))
        n_text = lines.count()
        kinds = {k: sum(by_reason.values()) for k, by_reason in parse.write_staged(staged, staged_path).items()}
        assert n_plain == n_text == n == sum(kinds.values()), (n_plain, n_text, n, kinds)
        per_core = lambda s: n / s / args.cores  # noqa: E731
        c = args.cores
        rows = [
            ("plain bz2 decompression (python bz2, 1 core)", n / s_plain, "lines/s"),
            (f"spark bz2 read + count, no column ({c} cores)", per_core(secs["read"]), "lines/s/core"),
            (f"spark read, lines as strings ({c} cores)", per_core(secs["lines"]), "lines/s/core"),
            (f"spark parse lex, JVM lexer ({c} cores)", per_core(secs["lex"]), "lines/s/core"),
            (f"spark parse lex + staged parquet ({c} cores)", per_core(secs["lex_write"]), "lines/s/core"),
        ]
        print(f"best of {args.rounds} interleaved rounds")
        for label, rate, unit in rows:
            print(f"{label:48s} {rate:12,.0f} {unit}")
        read = secs["read"]
        print("time / spark decompression: " + ", ".join(
            f"{name} {secs[name] / read:.2f}x" for name in ("lines", "lex", "lex_write")))
        print(f"ratio parse lex per core / plain bz2:  {per_core(secs['lex']) / (n / s_plain):.2f}x throughput")
        print(f"line kinds: {kinds} (skip: counted, not written)")
        if args.full:
            t = time.perf_counter()
            counts = parse.run(StageContext(cfg, spark=spark))
            s_full = time.perf_counter() - t
            print(f"full parse stage ({args.cores} cores): {per_core(s_full):12,.0f} lines/s/core, "
                  f"{counts['statements']:,} statements, {counts['terms']:,} terms")
        spark.stop()


if __name__ == "__main__":
    main()
