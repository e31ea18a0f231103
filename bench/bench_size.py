"""The bytes of a whole build, preset beside preset: tree, provenance, rows, build time, walk.

By default on the ``wikidata-stressed`` preset (its plain cut shaped like an unseen Wikidata
dump's: many subjects of a few facts below shared first words) and the ``wikidata`` preset,
each also with the plain cut; every row says the shape it was measured on: rows per fact, the
median stored row body and the share of rows with at most 10 facts of their own.

Runs ``bench/bench_e2e.py`` once per ``--presets`` preset (each its own generated dump of
``--lines`` lines, its own build in ``local[--cores]``, its own walk), and once more with the
plain cut (``tree.pack_facts=0``) on the same dump for each ``--plain`` preset (the
baseline of the packed rows, same run), then prints and writes
one table: tree B/fact (table + B-tree), provenance B/fact, total, rows per fact, the histogram
of facts stored per row, the zstd floor of the token ids, whole-build seconds per 1M facts by
stage, and the walk (mean / p50 / p99 per step, round trips per step; the compiled decoder,
``prefetch_leaves`` 0). ``--json`` gets every figure with the date, machine, commit and command;
``--md`` the table.

    .venv/bin/python bench/bench_size.py --json docs/figures/size-presets.json --md docs/figures/size-presets.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_preset(preset: str, lines: int, cores: int, walks: int, work: Path, dsn: str, plain: bool = False,
               python: str | None = None, baselines: bool = True) -> dict:
    out = work / f"e2e-{preset}{'-plain' if plain else ''}{'-baseline' if python else ''}.json"
    cmd = [python or sys.executable, str(ROOT / "bench" / "bench_e2e.py"), "--preset", preset, "--lines", str(lines),
           "--cores", str(cores), "--skew", "0", "--walks", str(walks), "--prefetch-leaves", "0",
           "--work", str(work / preset), "--dsn", dsn, "--out", str(out)] + (["--pack-facts", "0"] if plain else [])
    cmd += ["--no-baselines"] if python or not baselines else []  # the floor and the encoder: the facts', once
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return json.loads(out.read_text())


def zstd_floor_of(preset_work: Path, vocab: str = "qwen2.5") -> dict:
    """bench_e2e's zstd floor of the token ids its build of this preset wrote (the same facts
    whatever the code that builds the rows)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_e2e import zstd_floor_of_tokens

    found = sorted(preset_work.glob(f"build-local*/*/*/tokenize/{vocab}/tokens"))
    if not found:
        raise SystemExit(f"no tokenize output of {vocab} under {preset_work}")
    return zstd_floor_of_tokens(found[0])


# a row of at most this many facts of its own is a small row (the shape's third number)
SMALL_ROW_FACTS = 10


def row_bodies(preset_work: Path, vocab: str = "qwen2.5") -> dict:
    """The stored row bodies (``node``, bytes as the table holds them) of the build bench_e2e
    just made in ``preset_work`` (read before the next build of the preset replaces them):
    median, mean and p90 bytes."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    found = sorted(preset_work.glob(f"build-local*/*/*/prefix_rows/{vocab}/rows"))
    if not found:
        raise SystemExit(f"no prefix_rows output of {vocab} under {preset_work}")
    sizes = np.concatenate([pc.binary_length(batch.column("node")).to_numpy(zero_copy_only=False)
                            for batch in ds.dataset(str(found[0]), format="parquet").to_batches(columns=["node"])])
    return {"median": float(np.median(sizes)), "mean": round(float(sizes.mean()), 1),
            "p90": float(np.percentile(sizes, 90))}


def small_row_share(facts_per_row: dict[str, int]) -> float:
    """The share of rows that store at most SMALL_ROW_FACTS facts of their own, from bench_e2e's
    histogram (its bins end at 1, 2, 5, 10, ...; "0": rows that store none)."""
    def upper(label: str) -> float:
        return 0 if label == "0" else float("inf") if label.endswith("+") else int(label.split("-")[1])
    total = sum(facts_per_row.values())
    return sum(n for label, n in facts_per_row.items() if upper(label) <= SMALL_ROW_FACTS) / total if total else 0.0


def shape_line(preset: str, cut: str, row: dict) -> str:
    """The three numbers that say which shape a figure was measured on."""
    return (f"shape of {preset}, {cut}: {row['rows_per_fact']} rows/fact, median row body "
            f"{row['row_body_bytes']['median']:.0f} B, {row['small_row_share']:.1%} of rows with "
            f"<= {SMALL_ROW_FACTS} facts")


def row_of(preset: str, result: dict, floor: dict, plain: bool = False, cut: str | None = None,
           bodies: dict | None = None) -> dict:
    """One table row: ``result`` of one build, ``floor`` the zstd floor of its preset's facts,
    ``bodies`` its row bodies (:func:`row_bodies`)."""
    run = result["runs"][-1]
    idx = run["index"]
    walk = next((w for w in run.get("walk", {}).get("cursor", []) if w.get("decoder") == "compiled"),
                (run.get("walk", {}).get("cursor") or [None])[0])
    return {
        "preset": preset,
        "cut": cut or ("plain (baseline)" if plain else "packed rows"),
        "lines": result["lines"],
        "facts": run["distinct_facts"],
        "tree_bytes_per_fact": round(idx["bytes_per_fact"], 2),
        "provenance_bytes_per_fact": round(idx["provenance_bytes_per_fact"], 2),
        "total_bytes_per_fact": round(idx["total_bytes_per_fact"], 2),
        "rows_per_fact": round(idx["rows_per_fact"], 4),
        "facts_per_row": idx["facts_per_row"],
        "small_row_share": round(small_row_share(idx["facts_per_row"]), 3),
        "row_body_bytes": bodies,
        "pack_facts": idx.get("pack_facts"),
        "pack_child_facts": idx.get("pack_child_facts"),
        "zstd_floor_bytes_per_fact": round(floor["bytes_per_fact"], 2),
        "s_per_1m_facts": {name: s["s_per_1m_facts"] for name, s in run["stages"].items()},
        "whole_build_s_per_1m_facts": run["total_s_per_1m_facts"],
        "walk": None if walk is None else {k: walk[k] for k in ("decoder", "mean_us", "p50_us", "p99_us",
                                                               "round_trips_per_step", "steps")},
    }


def table(rows: list[dict]) -> str:
    lines = ["| preset | cut | facts | tree B/fact | provenance B/fact | total B/fact | rows/fact | zstd floor | "
             "build s/1M facts | walk mean / p50 / p99 µs | round trips/step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        w = r["walk"] or {}
        lines.append(f"| {r['preset']} | {r['cut']} | {r['facts']:,} | {r['tree_bytes_per_fact']} | {r['provenance_bytes_per_fact']} | "
                     f"**{r['total_bytes_per_fact']}** | {r['rows_per_fact']} | {r['zstd_floor_bytes_per_fact']} | "
                     f"{r['whole_build_s_per_1m_facts']} | {w.get('mean_us', 0):.1f} / {w.get('p50_us', 0):.1f} / "
                     f"{w.get('p99_us', 0):.0f} | {w.get('round_trips_per_step', 0):.3f} |")
    lines += ["", "The shape each was measured on:", ""]
    for r in rows:
        if r.get("row_body_bytes"):
            lines.append(f"- {shape_line(r['preset'], r['cut'], r)}")
    lines += ["", "Facts stored per row (rows):", ""]
    for r in rows:
        lines.append(f"- {r['preset']}, {r['cut']}: {r['facts_per_row']}")
    lines += ["", "Seconds per 1M facts by stage:", ""]
    for r in rows:
        lines.append(f"- {r['preset']}, {r['cut']}: " + ", ".join(f"{k} {v}" for k, v in r["s_per_1m_facts"].items()))
    return "\n".join(lines) + "\n"


def format_version_of(python: str) -> int:
    """The row format version the code installed beside ``python`` writes."""
    out = subprocess.run([python, "-c", "from refactx_index.tree.format import FORMAT_VERSION; print(FORMAT_VERSION)"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="wikidata-stressed,wikidata",
                        help="dumpgen presets (default: wikidata-stressed, whose plain cut is shaped like an "
                             "unseen Wikidata dump's, then wikidata)")
    parser.add_argument("--lines", default="5500000,5000000",
                        help="dump lines per preset (one value: all; the defaults give over 2M facts each)")
    parser.add_argument("--plain", default="wikidata-stressed,wikidata",
                        help="presets also built with the plain cut (tree.pack_facts=0, the same dump): "
                             "the baseline, in the same run (empty: none)")
    parser.add_argument("--baseline-python", default=None,
                        help="also build each preset (packed rows, the same dump) with this interpreter: the "
                             "code installed in its environment (e.g. another checkout's .venv/bin/python), the "
                             "baseline of a format change, in the same run")
    parser.add_argument("--baseline-label", default="baseline", help="the baseline rows' name in the table")
    parser.add_argument("--no-baselines", action="store_true",
                        help="no encoder baseline in any build (bench_e2e.py --no-baselines); the zstd floor is "
                             "then computed once per preset from its build's tokenize output (the facts', the same "
                             "for the same dump whatever the code; zstd level 19 on one core: 746 s for 2M facts "
                             "beside the test suite)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--walks", type=int, default=300)
    parser.add_argument("--work", default=str(ROOT / "build" / "bench_size"))
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--json", default=str(ROOT / "bench" / "out" / "size-presets.json"))
    parser.add_argument("--md", default=None, help="also write the table here")
    args = parser.parse_args()
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    lines = [int(v) for v in args.lines.split(",")]
    lines = lines * len(presets) if len(lines) == 1 else lines
    if len(lines) != len(presets):
        parser.error("--lines: one value, or one per preset")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    plain = {p.strip() for p in args.plain.split(",") if p.strip()}
    rows = []
    for p, n in zip(presets, lines):
        result = run_preset(p, n, args.cores, args.walks, work, args.dsn, baselines=not args.no_baselines)
        # the facts' floor, the same for every build of this dump; --no-baselines: from the tokenize output
        floor = result.get("zstd_floor") or zstd_floor_of(work / p)
        rows.append(row_of(p, result, floor, bodies=row_bodies(work / p)))
        if p in plain:
            plain_result = run_preset(p, n, args.cores, args.walks, work, args.dsn, plain=True)
            rows.append(row_of(p, plain_result, floor, plain=True, bodies=row_bodies(work / p)))
        if args.baseline_python:
            baseline = run_preset(p, n, args.cores, args.walks, work, args.dsn, python=args.baseline_python)
            rows.append(row_of(p, baseline, floor, cut=f"packed rows, {args.baseline_label}",
                               bodies=row_bodies(work / p)))
        for r in rows:
            if r["preset"] == p:
                print(shape_line(p, r["cut"], r), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    measured = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
                "command": shlex.join(["bench/bench_size.py", *sys.argv[1:]]),
                "format_version": format_version_of(sys.executable),
                "baseline_format_version": format_version_of(args.baseline_python) if args.baseline_python else None,
                "seconds": round(time.monotonic() - started), "load_avg": os.getloadavg()}
    text = table(rows)
    print("\n" + text)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"measured": measured, "presets": rows}, indent=2) + "\n")
    if args.md:
        Path(args.md).write_text(f"# Build size by preset\n\nMeasured {measured['date']}, commit `{commit}`, "
                                 f"{measured['machine']}: `{measured['command']}`\n\n" + text)
    print(f"figures: {args.json}")


if __name__ == "__main__":
    main()
