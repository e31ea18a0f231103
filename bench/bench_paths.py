"""Reasoning paths (docs/paths.md): the Spark ``paths`` stage on a generated dump, and the
runtime's per-question path trie.

Spark: a generated dump (``refactx_testing.dumpgen``) through parse, sitelinks,
labels and verbalize (not timed), then the ``paths`` stage alone with seeds by degree
(``--min-facts``): paths per second, bytes per path of its Parquet output, and its largest
task (the most records a task read and its peak execution memory, from Spark's own REST
status on the driver, on loopback), against the median task of the same stages.

Runtime: ``PathGraph.index`` (enumerate, tokenize as the tokenize stage does, build the
in-memory tree) per question, p50/p99 over ``--repeats`` builds, for seeds of the generated
graph's facts at low / median / high degree, and for a synthetic 2-hop neighbourhood of
10,100 paths (a seed with 100 edges to nodes of 100 edges each: the issue's target, p99 <=
200 ms). Three modes alternate in each repeat, each building the same trie (checked): ``cold``
(the graph keeps no label's ids: each label of the question is tokenized), ``warm`` (the
labels' ids kept from earlier questions on the same graph), and ``whole_texts`` (every path
text encoded whole and the tree built by ``MemoryTreeIndex.from_facts``: the build before).

    .venv/bin/python bench/bench_paths.py --lines 3500000     # the full run (1.19M facts, about 5 min here)
    .venv/bin/python bench/bench_paths.py --lines 20000       # a quick check that it works
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REFACTX_SHARED", ROOT.parent / "shared"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_e2e import dump_config, generate_dump  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def largest_task(spark, since_stage: int) -> dict[str, float]:
    """The largest task of the stages after ``since_stage`` by records read (shuffle + input),
    with its peak execution memory, and the median task's records, from the driver's REST API."""
    base = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/stages?status=complete") as resp:
        stages = [s for s in json.load(resp) if s["stageId"] > since_stage]
    records: list[tuple[int, int, int]] = []  # records, peak memory, stage
    for st in stages:
        url = f"{base}/api/v1/applications/{app}/stages/{st['stageId']}/{st['attemptId']}/taskList?length=100000"
        with urllib.request.urlopen(url) as resp:
            for task in json.load(resp):
                m = task.get("taskMetrics") or {}
                read = (m.get("inputMetrics", {}).get("recordsRead", 0)
                        + m.get("shuffleReadMetrics", {}).get("recordsRead", 0))
                records.append((read, m.get("peakExecutionMemory", 0), st["stageId"]))
    top = max(records)
    return {"tasks": len(records), "max_records": top[0], "max_task_peak_memory_mb": round(top[1] / 1e6, 1),
            "median_records": statistics.median(r for r, _, _ in records),
            "all_records": sum(r for r, _, _ in records)}


def spark_section(args) -> tuple[dict, object]:
    from refactx_pipeline.common import spark_session
    from refactx_pipeline.orchestration.pipeline import build

    work = Path(args.work)
    dump = generate_dump(work, args.lines, 0, 0)
    cfg = dump_config(dump, work / "build", args.cores, "qwen2.5")
    cfg = cfg.updated({"paths.dump_date": f"paths{args.cores}",
                       # the task metrics come from the UI's REST status
                       "spark.conf": {**cfg.spark.conf, "spark.ui.enabled": "true"},
                       "path_index.min_facts": args.min_facts, "path_index.max_hops": args.hops,
                       "path_index.max_fanout": args.max_fanout, "path_index.max_paths": args.max_paths})
    spark = spark_session(cfg, "bench_paths")
    if not (cfg.stage_dir("verbalize") / "facts").exists():
        build(cfg, ["parse", "sitelinks", "labels", "verbalize"], spark=spark)
    facts = json.loads((cfg.stage_dir("verbalize") / "counts.json").read_text())["facts"]
    with urllib.request.urlopen(f"{spark.sparkContext.uiWebUrl}/api/v1/applications/"
                                f"{spark.sparkContext.applicationId}/stages") as resp:
        before = max([s["stageId"] for s in json.load(resp)] + [-1])  # the stages before paths
    path_cfg = cfg.updated({"path_index.enabled": True})
    started = time.monotonic()
    counts = build(path_cfg, ["paths"], spark=spark)[0].counts
    seconds = time.monotonic() - started
    out = path_cfg.stage_dir("paths") / "paths"
    size = sum(f.stat().st_size for f in out.glob("*.parquet"))
    figures = {
        "facts": facts, "cores": args.cores, "seconds": round(seconds, 1), "counts": counts,
        "paths_per_s": round(counts["written"] / seconds, 1),
        "bytes_per_path": round(size / max(1, counts["written"]), 1),
        "largest_task": largest_task(spark, before),
    }
    texts_dir = cfg.stage_dir("verbalize") / "facts"
    import pyarrow.dataset as ds

    texts = ds.dataset(str(texts_dir), format="parquet").to_table(columns=["text", "kind"])
    fact_texts = [t for t, k in zip(texts.column("text").to_pylist(), texts.column("kind").to_pylist())
                  if k in ("statement", "inverse")]
    spark.stop()
    return figures, fact_texts


def trie_section(args, fact_texts: list[str] | None) -> dict:
    from tokenizers import Tokenizer

    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.prompting.paths import END, PathCaps, PathGraph

    tokenizer = Tokenizer.from_file(str(SHARED / "tokenizers" / "qwen2.5" / "tokenizer.json"))
    caps = PathCaps(2, args.max_fanout, args.max_paths)

    def whole(graph: PathGraph, seed: str):
        """The baseline build: every path text encoded whole
        (``encode_facts``) and the tree built by ``from_facts``; the same index."""
        found = graph.paths([seed], caps)
        return MemoryTreeIndex.from_facts([p + END for p in found.paths], tokenizer, name="paths",
                                          index_kind="paths", dictionary=False), found

    def cold(graph: PathGraph, seed: str):
        graph.forget_tokens()  # no label's ids kept from an earlier question
        return graph.index([seed], tokenizer, caps)

    def warm(graph: PathGraph, seed: str):
        return graph.index([seed], tokenizer, caps)

    modes = {"whole_texts": whole, "cold": cold, "warm": warm}

    def timed(graph: PathGraph, seed: str) -> dict:
        """p50/p99 wall and p50 CPU per mode; the modes alternate within each repeat, so a
        load burst from other processes falls on all of them."""
        times: dict[str, list[float]] = {m: [] for m in modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}
        rows = {}
        warm(graph, seed)  # the first build of the warm mode is a cold one
        for _ in range(args.repeats):
            for mode, build in modes.items():
                started, started_cpu = time.perf_counter(), time.process_time()
                index, found = build(graph, seed)
                times[mode].append(time.perf_counter() - started)
                cpu[mode].append(time.process_time() - started_cpu)
                rows[mode] = index.rows
        assert rows["whole_texts"] == rows["cold"] == rows["warm"]  # the same trie, byte for byte
        return {"paths": len(found.paths), "degree": graph.degree(seed),
                **{mode: {"p50_ms": round(1000 * percentile(times[mode], 0.5), 1),
                          "p99_ms": round(1000 * percentile(times[mode], 0.99), 1),
                          "cpu_p50_ms": round(1000 * percentile(cpu[mode], 0.5), 1)} for mode in modes}}

    out: dict[str, dict] = {"load_average": os.getloadavg()}
    hub = {"seed": [("r", f"n{i}") for i in range(100)],
           **{f"n{i}": [("s", f"m{i}-{j}") for j in range(100)] for i in range(100)}}
    out["synthetic_2hop_10k"] = timed(PathGraph(hub), "seed")
    if fact_texts:
        started = time.perf_counter()
        graph = PathGraph.from_fact_texts(fact_texts)
        out["graph_read_s"] = {"seconds": round(time.perf_counter() - started, 2), "nodes": graph.nodes}
        by_degree = sorted((graph.degree(n), n) for n in {t[1:].split("> <", 1)[0] for t in fact_texts})
        for name, q in [("low_degree", 0.1), ("median_degree", 0.5), ("high_degree", 1.0)]:
            out[name] = timed(graph, by_degree[int(q * (len(by_degree) - 1))][1])
    out["load_average_after"] = os.getloadavg()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=3_500_000,
                        help="generated dump lines (default 3,500,000: about 1.03M facts)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--work", default=str(ROOT / "build" / "bench-paths"))
    parser.add_argument("--min-facts", type=int, default=10, help="seeds: entities with this many kept statements")
    parser.add_argument("--hops", type=int, default=2)
    parser.add_argument("--max-fanout", type=int, default=100)
    parser.add_argument("--max-paths", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=50, help="trie builds per seed and mode")
    parser.add_argument("--trie-only", action="store_true", help="the runtime section alone (synthetic graph)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    figures: dict = {}
    fact_texts = None
    if not args.trie_only:
        figures["spark"], fact_texts = spark_section(args)
        print(json.dumps(figures["spark"], indent=1), flush=True)
    figures["trie"] = trie_section(args, fact_texts)
    print(json.dumps(figures["trie"], indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
