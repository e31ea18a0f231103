"""Draw the plots docs/benchmarks.md and docs/scale.md show from the committed figure JSONs.

Reads ``docs/figures/build-1m-realistic.json`` and ``build-5m-realistic.json`` (written by
``bench/bench_e2e.py``) and writes, beside them:

* ``build-stages.png``: seconds per 1M facts of each stage, one bar group per build size;
* ``index-size.png``: the index's bytes per fact (table + B-tree) against the zstd floor of the
  same facts' token ids.

No measurement runs here: it only draws what the JSONs hold (matplotlib: the runtime wheel's
``eval`` extra, which ``./dev`` installs).

    .venv/bin/python bench/plot_figures.py [--figures docs/figures]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILDS = (("1M facts", "build-1m-realistic.json"), ("5M facts", "build-5m-realistic.json"))
STAGES = ("parse", "sitelinks", "labels", "verbalize", "tokenize", "prefix_rows", "load", "validate")


def load_builds(figures: Path) -> list[tuple[str, dict, dict]]:
    """(label, the run on the most cores, the whole document) per build JSON that exists."""
    builds = []
    for label, name in BUILDS:
        path = figures / name
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        run = max(doc["runs"], key=lambda r: r["cores"])
        facts = run["distinct_facts"]
        builds.append((f"{label} ({facts:,})", run, doc))
    return builds


def plot_stages(builds, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(builds)
    for i, (label, run, doc) in enumerate(builds):
        values = [run["stages"][s]["s_per_1m_facts"] for s in STAGES]
        xs = [j + i * width for j in range(len(STAGES))]
        bars = ax.bar(xs, values, width, label=f"{label}: {run['total_s_per_1m_facts']:.1f} s per 1M in all "
                      f"({doc['measured']['date']}, {doc['measured']['commit'][:7]})")
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    centres = [j + width * (len(builds) - 1) / 2 for j in range(len(STAGES))]
    ax.set_xticks(centres, [s.replace("_", " ") for s in STAGES])
    ax.set_ylabel("seconds per 1M facts")
    ax.set_title("dump → active index, realistic preset, Qwen2.5, local[2], 2 cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_size(builds, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [label for label, _, _ in builds]
    table = [run["index"]["table_bytes_per_fact"] for _, run, _ in builds]
    btree = [run["index"]["index_bytes_per_fact"] for _, run, _ in builds]
    floor = [doc["zstd_floor"]["bytes_per_fact"] for _, _, doc in builds]
    xs = range(len(builds))
    ax.bar([x - 0.2 for x in xs], table, 0.4, label="index: table")
    top = ax.bar([x - 0.2 for x in xs], btree, 0.4, bottom=table, label="index: B-tree")
    ax.bar_label(top, labels=[f"{t + b:.1f}" for t, b in zip(table, btree)], fontsize=8)
    floor_bars = ax.bar([x + 0.2 for x in xs], floor, 0.4, label="zstd-19 floor of the token ids")
    ax.bar_label(floor_bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("bytes per fact")
    ax.set_title("index size against its zstd floor (T=1024, B=32768)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", type=Path, default=ROOT / "docs" / "figures")
    args = parser.parse_args()
    builds = load_builds(args.figures)
    if not builds:
        parser.error(f"no build JSON in {args.figures}: run bench/bench_e2e.py first")
    plot_stages(builds, args.figures / "build-stages.png")
    plot_size(builds, args.figures / "index-size.png")
    print(f"wrote {args.figures / 'build-stages.png'} and {args.figures / 'index-size.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
