"""Dump -> active index, end to end, measured per stage; with the baselines in the same run.

Input: a generated dump (``refactx_testing.dumpgen``, ``--preset realistic`` by
default: truthy N-Triples plus the enwiki page/page_props SQL dumps, distributions from
../shared's extracts, large label vocabularies; docs/scale.md), written once into ``--work``
and reused when it is already there. Then, for each ``--cores`` value, the whole pipeline
(parse ... activate, one vocabulary) in Spark ``local[c]`` against a PostgreSQL server, each
in a fresh build directory and database schema. Printed and written as JSON (``--out``),
plus a plot of time per stage (PNG, when matplotlib is installed):

* per stage: wall seconds, CPU seconds (the driver, its JVM and every Python worker),
  peak memory of the Python driver, of the JVM (Spark's driver and executors: one process
  in local mode) and of the Python workers together, rows in and out, distinct facts per
  second per core;
* the index: bytes per fact (table + B-tree), rows per fact, largest and p99 row;
* baselines, same input, same process: plain bz2 decompression of the dump (one core),
  and the plain ``tokenizers`` batch encoder on the verbalized fact texts (``c`` threads);
  the ratios the issue sets targets for: tokenize / encoder, and tokenize + prefix rows +
  load / encoder.
* the zstd floor: the build's sorted, distinct token id sequences compressed by zstd (level
  19), in bytes per fact, beside the index's bytes per fact;
* generation's walk on the last run's index (``--walks``, ``bench_walk``'s leaf-weighted walks
  replayed on a cold cache): mean / p50 / p99 per step and round trips per step, for a
  cursor per ``--prefetch-leaves`` value (0: only the row it reaches) and per row decoder
  (``--decoders``: the compiled one and numpy, the baseline, on the same walks);
* the hot prefix (``--skew``: one label prefix with at least that many facts below it):
  lookup latency of its node, cold and warm.

Run it alone on a quiet machine (2 cores: anything else running distorts every figure):

    .venv/bin/python bench/bench_e2e.py --lines 13500000 --cores 1,2 --skew 1000000 \\
        --dsn postgresql://postgres@127.0.0.1:5432/postgres --out bench/out/e2e.json

The committed figures (docs/benchmarks.md) are named for the build they measure, e.g.
``--lines 3000000 --cores 2 --skew 0 --out docs/figures/build-1m-realistic.json`` (its plot
beside it as ``build-1m-realistic.png``); ``bench/plot_figures.py`` redraws the plots that
compare builds.
"""

from __future__ import annotations

import argparse
import bz2
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared"
PER_FACT_STAGES = ("tokenize", "prefix_rows", "load")


class ProcessTreeSampler:
    """Peak RSS of the JVM and of the Python workers, sampled every ``interval_s``, and the
    CPU seconds of this process and all its descendants."""

    def __init__(self, interval_s: float = 0.25) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak_jvm = 0
        self.peak_workers = 0
        self.peak_driver = 0
        self._cpu_seen: dict[int, float] = {}

    def _tree(self) -> list[Any]:
        try:
            return [self._me, *self._me.children(recursive=True)]
        except self._psutil.Error:
            return [self._me]

    def cpu_seconds(self) -> float:
        """CPU seconds of the tree so far (exited workers keep what was last seen of them)."""
        for proc in self._tree():
            try:
                t = proc.cpu_times()
                self._cpu_seen[proc.pid] = t.user + t.system
            except self._psutil.Error:
                pass
        return sum(self._cpu_seen.values())

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            jvm = workers = 0
            try:
                self.peak_driver = max(self.peak_driver, self._me.memory_info().rss)
            except self._psutil.Error:
                pass
            for proc in self._tree()[1:]:
                try:
                    name = proc.name()
                    rss = proc.memory_info().rss
                except self._psutil.Error:
                    continue
                if name == "java":
                    jvm += rss
                elif name.startswith("python"):
                    workers += rss
            self.peak_jvm = max(self.peak_jvm, jvm)
            self.peak_workers = max(self.peak_workers, workers)
            self.cpu_seconds()

    def reset_peaks(self) -> None:
        self.peak_jvm = self.peak_workers = self.peak_driver = 0

    def __enter__(self) -> "ProcessTreeSampler":
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()


def generate_dump(work: Path, lines: int, seed: int, skew: int, preset: str = "realistic") -> Path:
    """The generated dump's folder (reused when its manifest says the same arguments)."""
    from refactx_testing import dumpgen

    out = work / f"dump-{preset}-{lines}-{seed}-{skew}"
    manifest = out / "manifest.json"
    if manifest.exists():
        return out
    started = time.monotonic()
    dumpgen.generate(out, lines=lines, seed=seed, skew_facts=skew, preset=preset)
    print(f"dump generated in {time.monotonic() - started:.0f} s: {out}", flush=True)
    return out


def dump_config(dump: Path, build_root: Path, cores: int, vocab: str, java_options: str | None = None,
                driver_memory: str = "6g", ui: bool = False):
    """The build's config; ``java_options``: its JVM's (None: the config's default, ParallelGC);
    ``ui``: Spark's UI on (loopback), for the tasks' figures (``task_figures``)."""
    from refactx_pipeline.config import Config, VocabularyConfig

    manifest = json.loads((dump / "manifest.json").read_text())
    jvm = {} if java_options is None else {"spark.java_options": java_options}
    return Config().updated({
        **jvm,
        "paths.build_root": str(build_root),
        "paths.dump_date": f"bench{cores}",
        "input.dumps": [str(dump / manifest["truthy"])],
        "input.enwiki_page": str(dump / manifest["page"]),
        "input.enwiki_page_props": str(dump / manifest["page_props"]),
        "tokenize.vocabularies": [VocabularyConfig(name=vocab, path=str(SHARED / "tokenizers" / vocab))],
        "spark.master": f"local[{cores}]",
        "spark.driver_memory": driver_memory,
        "spark.shuffle_partitions": max(8, 4 * cores),
        "spark.conf": {"spark.ui.showConsoleProgress": "false", **({"spark.ui.enabled": "true"} if ui else {})},
    })


def bz2_baseline(path: Path) -> dict[str, float]:
    """Plain decompression of the dump, one core: bytes and lines per second."""
    started = time.monotonic()
    cpu = time.process_time()
    size = lines = 0
    with bz2.open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            size += len(chunk)
            lines += chunk.count(b"\n")
    wall = time.monotonic() - started
    return {"wall_s": wall, "cpu_s": time.process_time() - cpu, "mb_per_s": size / wall / 1e6,
            "lines_per_s": lines / wall, "lines": lines}


def encoder_baseline(cfg, threads: int) -> dict[str, float]:
    """The plain ``tokenizers`` batch encoder on the verbalized fact texts, ``threads`` threads.

    In a child process: the Rust encoder sizes its thread pool once per process, from
    ``RAYON_NUM_THREADS`` at its first parallel call, so a second baseline with another
    thread count in this process would silently reuse the first one's pool."""
    import subprocess

    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    env.pop("LD_PRELOAD", None)  # the allocator a user's process has
    child = subprocess.run(
        [sys.executable, __file__, "--encoder-child", str(cfg.stage_dir("verbalize") / "facts"),
         "--encoder-tokenizer", str(Path(cfg.tokenize.vocabularies[0].path) / "tokenizer.json"),
         "--encoder-prefix", cfg.tokenize.fact_prefix],
        env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(child.stdout.strip().splitlines()[-1]), threads=threads)


def encoder_child(facts_dir: str, tokenizer_file: str, prefix: str) -> None:
    import pyarrow.dataset as ds
    from tokenizers import Tokenizer

    texts = ds.dataset(facts_dir, format="parquet").to_table(columns=["text"]).column("text").to_pylist()
    tok = Tokenizer.from_file(tokenizer_file)
    started = time.monotonic()
    for i in range(0, len(texts), 100_000):
        tok.encode_batch([prefix + t for t in texts[i:i + 100_000]], add_special_tokens=False)
    wall = time.monotonic() - started
    print(json.dumps({"wall_s": wall, "facts": len(texts), "facts_per_s": len(texts) / wall,
                      "rayon_threads": os.environ.get("RAYON_NUM_THREADS")}))


def set_ratios(summary: dict[str, Any]) -> None:
    if "encoder" not in summary or "tokenize_prefix_load_s" not in summary:  # --no-baselines, --from-stage
        return
    facts, encoder = summary["distinct_facts"], summary["encoder"]
    summary["ratios"] = {
        "tokenize_vs_encoder": (facts / summary["stages"]["tokenize"]["wall_s"]) / encoder["facts_per_s"],
        "tokenize_prefix_load_vs_encoder": (facts / summary["tokenize_prefix_load_s"]) / encoder["facts_per_s"],
    }


def hot_prefix_latency(dsn: str, cfg, index_name: str, hot_text: str) -> dict[str, Any]:
    """Cold and warm lookup latency of the node of ``hot_text`` (the skewed prefix)."""
    from refactx_index.tree.pg import open_index
    from refactx_index.vocab import open_tokenizer

    tok = open_tokenizer(cfg.tokenize.vocabularies[0].path)
    ids = tok.encode(cfg.tokenize.fact_prefix + hot_text, add_special_tokens=False).ids
    with open_index(dsn, index_name, schema=cfg.pg.schema, follow=False) as index:
        # the deepest prefix of the hot text that is still a node of the tree
        k = len(ids)
        while k and index.next_tokens(ids[:k]).empty:
            k -= 1
        cold = []
        for _ in range(20):
            index.cache.clear()
            t0 = time.perf_counter()
            answer = index.next_tokens(ids[:k])
            cold.append(time.perf_counter() - t0)
        warm = []
        for _ in range(200):
            t0 = time.perf_counter()
            index.next_tokens(ids[:k])
            warm.append(time.perf_counter() - t0)
    cold.sort()
    warm.sort()
    return {"prefix_tokens": k, "facts_below": int(answer.total_leaves), "children": int(answer.tokens.size),
            "cold_ms_median": cold[len(cold) // 2] * 1e3, "cold_ms_max": cold[-1] * 1e3,
            "warm_us_median": warm[len(warm) // 2] * 1e6}


def zstd_floor(cfg, vocab: str) -> dict[str, Any]:
    """What the facts' token ids hold, as a general compressor sees it
    (``dumpgen.floor.token_ids_floor``: the build's distinct token id sequences sorted,
    concatenated, one zstd frame), in bytes per fact. No index can be expected to beat it by
    much; it says how far the rows are from it."""
    return zstd_floor_of_tokens(cfg.stage_dir("tokenize") / vocab / "tokens")


def zstd_floor_of_tokens(tokens: Path) -> dict[str, Any]:
    """:func:`zstd_floor` of a tokenize stage's output folder."""
    import numpy as np
    import pyarrow.dataset as ds

    from refactx_testing.dumpgen.floor import ZSTD_LEVEL, token_ids_floor

    table = ds.dataset(str(tokens), format="parquet").to_table(columns=["token_ids"])
    ids = table.column("token_ids").combine_chunks()
    raw = ids.values.to_numpy().astype(">u4").tobytes()
    offsets = ids.offsets.to_numpy()
    started = time.monotonic()
    facts, packed = token_ids_floor(raw[4 * a:4 * b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()))
    return {"facts": facts, "tokens_per_fact": float(np.diff(offsets).mean()), "zstd_level": ZSTD_LEVEL,
            "bytes_per_fact": packed / facts, "compress_s": round(time.monotonic() - started, 1)}


def decoders_available() -> list[str]:
    from refactx_index.tree import format as fmt
    return sorted(fmt.DECODERS)


def walk_figures(dsn: str, schema: str, index_name: str, walks: int, prefetch: list[int],
                 decoders: list[str], seed: int = 1) -> dict[str, Any]:
    """Generation's lookup pattern on the built index (``bench_walk``'s walks: leaf-weighted
    choices until a fact ends), replayed on a cold cache by a cursor per row decoder
    (``format.DECODER``) and ``prefetch_leaves`` value (0: it fetches only the row it
    reaches): per step, with round trips per step."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_walk import draw_walks, time_walks
    from refactx_index.tree import format as fmt
    from refactx_index.tree.index import PREFETCH_LEAVES

    paths = draw_walks(dsn, index_name, walks, np.random.default_rng(seed), schema)
    cursors = []
    default = fmt.DECODER
    try:
        for decoder in decoders:
            fmt.DECODER = decoder
            cursors += [{"decoder": decoder, "prefetch_leaves": leaves,
                         **time_walks(dsn, index_name, paths, "cursor", leaves, schema)} for leaves in prefetch]
    finally:
        fmt.DECODER = default
    return {"walks": walks, "default_prefetch_leaves": PREFETCH_LEAVES, "default_decoder": default,
            "cursor": cursors}


def task_figures(spark, spans: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Per pipeline stage (``spans``: its epoch start and end seconds), from Spark's UI (REST, on
    loopback): its Spark stages and tasks, and its largest task (the longest run time, with
    its Spark stage's name, input and shuffle read bytes, peak execution memory and spill)."""
    import urllib.request
    from datetime import datetime, timezone

    ui, app = spark.sparkContext.uiWebUrl, spark.sparkContext.applicationId

    def rest(path: str) -> Any:
        with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/{path}", timeout=60) as response:
            return json.load(response)

    def epoch(stamp: str | None) -> float | None:
        if not stamp:
            return None
        parsed = datetime.strptime(stamp.replace("GMT", ""), "%Y-%m-%dT%H:%M:%S.%f")
        return parsed.replace(tzinfo=timezone.utc).timestamp()

    out: dict[str, Any] = {name: {"spark_stages": 0, "tasks": 0, "largest_task": None} for name in spans}
    for st in rest("stages?status=complete&details=false"):
        submitted = epoch(st.get("submissionTime"))
        name = next((n for n, (a, b) in spans.items() if submitted is not None and a <= submitted <= b), None)
        if name is None:
            continue
        fig = out[name]
        fig["spark_stages"] += 1
        fig["tasks"] += st.get("numCompleteTasks", 0)
        summary = rest(f"stages/{st['stageId']}/{st['attemptId']}/taskSummary?quantiles=0.5,1.0")

        def top(key: str, summary: dict = summary) -> float:
            values = summary.get(key) or [0, 0]
            return values[-1]

        def nested(group: str, key: str, summary: dict = summary) -> float:
            values = (summary.get(group) or {}).get(key) or [0, 0]
            return values[-1]

        largest = {"spark_stage": st["stageId"], "name": st.get("name", "")[:120],
                   "tasks_in_stage": st.get("numCompleteTasks", 0),
                   "run_s": top("executorRunTime") / 1e3,
                   "median_run_s": (summary.get("executorRunTime") or [0, 0])[0] / 1e3,
                   "gc_s": top("jvmGcTime") / 1e3,
                   "peak_execution_memory_mb": top("peakExecutionMemory") / 2**20,
                   "input_mb": nested("inputMetrics", "bytesRead") / 2**20,
                   "shuffle_read_mb": nested("shuffleReadMetrics", "readBytes") / 2**20,
                   "spill_disk_mb": top("diskBytesSpilled") / 2**20}
        if fig["largest_task"] is None or largest["run_s"] > fig["largest_task"]["run_s"]:
            fig["largest_task"] = largest
    return out


def run_build(dump: Path, work: Path, cores: int, vocab: str, dsn: str, sampler: ProcessTreeSampler,
              java_options: str | None = None, tree: dict[str, Any] | None = None,
              driver_memory: str = "6g", tasks: bool = False, from_stage: str | None = None) -> dict:
    """The whole build, or (``from_stage``) its stages from that one on, on the earlier stages'
    outputs an earlier run left in the same build folder."""
    from refactx_pipeline.common import spark_session
    from refactx_pipeline.orchestration.pipeline import build, select_stages

    cfg = dump_config(dump, work / f"build-local{cores}", cores, vocab, java_options, driver_memory, ui=tasks)
    cfg = cfg.updated({"pg.schema": f"bench_e2e_{cores}", **(tree or {})})
    selected = select_stages(cfg)
    if from_stage is not None and from_stage not in selected:
        raise SystemExit(f"--from-stage: {from_stage!r} is not among this build's stages {selected}")
    only = selected[selected.index(from_stage):] if from_stage else None
    stages: dict[str, dict[str, Any]] = {}
    marks: dict[str, tuple[float, float]] = {}
    spans: dict[str, tuple[float, float]] = {}

    def on_stage(name: str, result) -> None:
        if result is None:
            sampler.reset_peaks()
            spans[name] = (time.time(), float("inf"))
            marks[name] = (time.monotonic(), sampler.cpu_seconds())
            print(f"  [{cores} cores] {name} ...", flush=True)
            return
        started, cpu = marks[name]
        spans[name] = (spans[name][0], time.time())
        stages[name] = {"wall_s": time.monotonic() - started, "cpu_s": sampler.cpu_seconds() - cpu,
                        "peak_jvm_mb": sampler.peak_jvm / 2**20, "peak_workers_mb": sampler.peak_workers / 2**20,
                        "peak_driver_py_mb": sampler.peak_driver / 2**20,
                        "counts": result.counts}
        print(f"  [{cores} cores] {name}: {stages[name]['wall_s']:.1f} s wall, {stages[name]['cpu_s']:.1f} s CPU",
              flush=True)

    spark = spark_session(cfg, f"bench_e2e_local{cores}")
    task_figs: dict[str, Any] = {}
    try:
        build(cfg, only, spark=spark, on_stage=on_stage, dsn=dsn)
        if tasks:
            try:
                task_figs = task_figures(spark, spans)
            except Exception:  # the build's figures stand without them
                logging.exception("the tasks' figures could not be read from Spark's UI")
    finally:
        spark.stop()
    return {"cfg": cfg, "stages": stages, "tasks": task_figs}


def summarize(build: dict, cores: int) -> dict[str, Any]:
    stages = build["stages"]
    tree = stages["prefix_rows"]["counts"]["vocabularies"]
    (vocab_counts,) = tree.values()
    facts = vocab_counts["distinct_facts"]
    load = next(iter(stages["load"]["counts"]["vocabularies"].values()))
    out: dict[str, Any] = {"cores": cores, "distinct_facts": facts, "stages": {}}
    for name, s in stages.items():
        out["stages"][name] = {
            "wall_s": round(s["wall_s"], 2), "cpu_s": round(s["cpu_s"], 2),
            "peak_jvm_mb": round(s["peak_jvm_mb"]), "peak_workers_mb": round(s["peak_workers_mb"]),
            "peak_driver_py_mb": round(s["peak_driver_py_mb"]),
            "facts_per_s_per_core": round(facts / s["wall_s"] / cores) if s["wall_s"] else None,
            "s_per_1m_facts": round(s["wall_s"] / facts * 1e6, 1),
            "rows_in_out": rows_in_out(name, s["counts"]),
        }
        if name in build.get("tasks", {}):
            out["stages"][name]["spark"] = build["tasks"][name]
    prov = load.get("provenance") or {}
    prov_bytes = (prov.get("table_bytes") or 0) + (prov.get("index_bytes") or 0)
    out["index"] = {
        "bytes_per_fact": (load["table_bytes"] + load["index_bytes"]) / facts,
        "table_bytes_per_fact": load["table_bytes"] / facts,
        "index_bytes_per_fact": load["index_bytes"] / facts,
        "provenance_bytes_per_fact": prov_bytes / facts,
        "total_bytes_per_fact": (load["table_bytes"] + load["index_bytes"] + prov_bytes) / facts,
        "rows_per_fact": vocab_counts["rows"] / facts,
        "facts_per_row": facts_per_row(vocab_counts["path"]),
        "pack_facts": tree_counts_of(stages).get("pack_facts"),
        "pack_child_facts": tree_counts_of(stages).get("pack_child_facts"),
        "largest_row_bytes": vocab_counts["largest_row_bytes"],
        "p99_row_bytes": vocab_counts["p99_row_bytes"],
        "deepest_row": vocab_counts["max_depth"],
    }
    out["peak_mb"] = {key: max(round(s[key]) for s in stages.values())
                      for key in ("peak_jvm_mb", "peak_workers_mb", "peak_driver_py_mb")}
    out["total_wall_s"] = round(sum(s["wall_s"] for s in stages.values()), 1)
    out["total_s_per_1m_facts"] = round(out["total_wall_s"] / facts * 1e6, 1)
    if all(n in stages for n in PER_FACT_STAGES):  # not in a run --from-stage after tokenize
        out["tokenize_prefix_load_s"] = sum(stages[n]["wall_s"] for n in PER_FACT_STAGES)
    return out


def tree_counts_of(stages: dict[str, Any]) -> dict[str, Any]:
    return stages["prefix_rows"]["counts"]


# facts stored in a row (not below its external nodes): the histogram's bins, upper bounds
FACTS_PER_ROW_BINS = (1, 2, 5, 10, 50, 200, 1024, 4096, 2**62)


def facts_per_row(rows_path: str) -> dict[str, int]:
    """How many rows store how many facts of their own (a row's leaves less those below its
    external nodes), binned; "0" counts rows that store none (an expanded row's children all
    external)."""
    import numpy as np
    import pyarrow.dataset as ds

    from refactx_index.tree import format as fmt
    path = Path(rows_path)
    dictionary_file = path.parent / "dictionary.bin"
    dictionary = fmt.PresetDictionary(dictionary_file.read_bytes()) if dictionary_file.exists() else None
    own = []
    for batch in ds.dataset(str(path), format="parquet").to_batches(columns=["node"]):
        for node in batch.column("node").to_pylist():
            frag = fmt.decode_fragment(node, dictionary=dictionary)
            own.append(int(frag.leaves[0]) - int(frag.leaves[frag.external].sum()))
    counts = np.asarray(own)
    out = {"0": int((counts == 0).sum())}
    low = 0
    for high in FACTS_PER_ROW_BINS:
        out[f"{low + 1}-{high}" if high < 2**62 else f"{low + 1}+"] = int(((counts > low) & (counts <= high)).sum())
        low = high
    return out


def rows_in_out(stage: str, counts: dict[str, Any]) -> dict[str, Any]:
    """The few counts that say how much went in and out of a stage."""
    keep = ("lines", "statements", "kept", "rejected", "facts", "rows", "distinct_facts", "quarantined",
            "labels", "items", "entities", "encoded", "copied_rows")
    flat: dict[str, Any] = {}
    for key, value in counts.items():
        if key in keep and isinstance(value, (int, float)):
            flat[key] = value
    for per_vocab in (counts.get("vocabularies") or {}).values():
        if isinstance(per_vocab, dict):
            for key in keep:
                if isinstance(per_vocab.get(key), (int, float)):
                    flat[key] = per_vocab[key]
    return flat


def plot(results: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logging.warning("matplotlib is not installed: no plot (pip install matplotlib)")
        return False
    runs = results["runs"]
    names = list(runs[0]["stages"])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    left = [0.0] * len(runs)
    labels = [f"local[{r['cores']}]" for r in runs]
    for name in names:
        widths = [r["stages"].get(name, {}).get("wall_s", 0) for r in runs]
        ax.barh(labels, widths, left=left, label=name)
        left = [a + b for a, b in zip(left, widths)]
    facts = runs[0]["distinct_facts"]
    base = results["baselines"]
    ax.set_xlabel("wall seconds")
    bz2_alone = f"; bz2 alone {base['bz2']['wall_s']:.0f} s" if "bz2" in base else ""
    ax.set_title(f"dump -> active index, {facts:,} facts ({results['lines']:,} dump lines){bz2_alone}")
    ax.legend(ncol=5, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=13_500_000, help="dump lines to generate (13.5M: just over 5M facts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="realistic", choices=["realistic", "dense", "wikidata", "wikidata-stressed"],
                        help="the dump generator's preset (docs/scale.md, 'The realistic preset', 'The "
                             "wikidata preset')")
    parser.add_argument("--skew", type=int, default=1_000_000,
                        help="facts below one hot label prefix (0: none)")
    parser.add_argument("--cores", default="1,2", help="comma-separated local[N] runs")
    parser.add_argument("--walks", type=int, default=300,
                        help="generation's walks replayed cold on the last run's index (0: no walk)")
    parser.add_argument("--prefetch-leaves", default="0,64,256,2048",
                        help="the walk's cursors: comma-separated prefetch_leaves values, one replay each")
    parser.add_argument("--decoders", default=",".join(decoders_available()),
                        help="the row decoders the walk is replayed with, one replay per decoder and "
                             "prefetch_leaves value (format.DECODER; default: every one this runtime has)")
    parser.add_argument("--vocab", default="qwen2.5", help="a tokenizer under ../shared/tokenizers")
    parser.add_argument("--java-options", default=None,
                        help="the build JVM's options (spark.java_options; default: the config's, "
                             "-XX:+UseParallelGC); --java-options=-XX:+UseG1GC is the JDK's own default")
    parser.add_argument("--pack-facts", type=int, default=None,
                        help="tree.pack_facts (default: the config's, 4 x T; 0: every child of an "
                             "expanded prefix a row of its own, the plain cut)")
    parser.add_argument("--driver-memory", default="6g", help="spark.driver_memory: the JVM's heap (local mode: "
                        "Spark's driver and executors)")
    parser.add_argument("--tasks", action="store_true",
                        help="Spark's UI on during the builds, read at the end: per stage its Spark stages, "
                             "tasks and largest task (run time, input, shuffle read, peak execution memory)")
    parser.add_argument("--no-baselines", action="store_true",
                        help="skip the bz2 and encoder baselines and the zstd floor (at 20M facts they take "
                             "longer than half the build: the floor's zstd-19 alone ~20 min)")
    parser.add_argument("--from-stage", default=None,
                        help="run the build's stages from this one on (e.g. prefix_rows), on the outputs of "
                             "the earlier stages that an earlier run with the same --work, --lines and --cores "
                             "left; only these stages are measured")
    parser.add_argument("--work", default=str(ROOT / "build" / "bench_e2e"), help="dump and build folder")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a server where a scratch database may be created and dropped")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "e2e.json"))
    parser.add_argument("--rebaseline", action="store_true",
                        help="only measure the encoder baselines again (of the --cores runs), on the builds an "
                             "earlier run left in --work, and update --out's ratios")
    parser.add_argument("--encoder-child", help=argparse.SUPPRESS)  # child mode: FACTS_DIR
    parser.add_argument("--encoder-tokenizer", help=argparse.SUPPRESS)
    parser.add_argument("--encoder-prefix", help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = set(args.decoders.split(",")) - set(decoders_available())
    if unknown:
        parser.error(f"--decoders: {sorted(unknown)} not among this runtime's {decoders_available()}")
    logging.basicConfig(level=logging.WARNING)
    if args.encoder_child:
        encoder_child(args.encoder_child, args.encoder_tokenizer, args.encoder_prefix)
        return

    from tests.pgtree import fresh_database

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    dump = generate_dump(work, args.lines, args.seed, args.skew, args.preset)
    dump_seconds = round(time.monotonic() - started, 1)
    if args.rebaseline:
        results = json.loads(out.read_text())
        for summary in [r for r in results["runs"] if str(r["cores"]) in args.cores.split(",")]:
            cfg = dump_config(dump, work / f"build-local{summary['cores']}", summary["cores"], results["vocab"])
            summary["encoder"] = encoder_baseline(cfg, summary["cores"])
            set_ratios(summary)
        out.write_text(json.dumps(results, indent=2, default=str))
        print_table(results)
        return
    manifest = json.loads((dump / "manifest.json").read_text())
    results: dict[str, Any] = {"lines": args.lines, "seed": args.seed, "skew": args.skew, "preset": args.preset,
                               "vocab": args.vocab, "cpu_count": os.cpu_count(), "runs": [], "baselines": {},
                               "measured": measured_on(), "dump_generate_s": dump_seconds,
                               "driver_memory": args.driver_memory, "from_stage": args.from_stage}
    if not args.no_baselines:
        print("baseline: bz2 decompression ...", flush=True)
        results["baselines"]["bz2"] = bz2_baseline(dump / manifest["truthy"])
    with fresh_database(args.dsn, "refactx_bench_e2e") as dsn, ProcessTreeSampler() as sampler:
        for cores in [int(c) for c in args.cores.split(",")]:
            tree = {} if args.pack_facts is None else {"tree.pack_facts": args.pack_facts}
            build = run_build(dump, work, cores, args.vocab, dsn, sampler, args.java_options, tree,
                              args.driver_memory, args.tasks, args.from_stage)
            results["java_options"] = build["cfg"].spark.java_options
            summary = summarize(build, cores)
            if not args.no_baselines:
                summary["encoder"] = encoder_baseline(build["cfg"], cores)
            set_ratios(summary)
            if args.skew and manifest.get("hot_label"):
                cfg = build["cfg"]
                summary["hot_prefix"] = hot_prefix_latency(
                    dsn, cfg, cfg.index_name(args.vocab), "<" + manifest["hot_label"])
            if "zstd_floor" not in results and not args.no_baselines:  # the facts' own figure: the same for every run
                results["zstd_floor"] = zstd_floor(build["cfg"], args.vocab)
            if args.walks and cores == int(args.cores.split(",")[-1]):
                print(f"  [{cores} cores] walk: {args.walks} walks, cold cache ...", flush=True)
                summary["walk"] = walk_figures(dsn, build["cfg"].pg.schema, build["cfg"].index_name(args.vocab),
                                               args.walks, [int(v) for v in args.prefetch_leaves.split(",")],
                                               args.decoders.split(","))
            results["runs"].append(summary)
            print(json.dumps({k: v for k, v in summary.items() if k != "stages"}, indent=2), flush=True)
            # after every run, not only at the end: a long run cut short keeps what it measured
            out.write_text(json.dumps(results, indent=2, default=str))
    print_table(results)
    if plot(results, out.with_suffix(".png")):
        print(f"plot: {out.with_suffix('.png')}")
    print(f"figures: {out}")


def measured_on() -> dict[str, Any]:
    """When, where, what code and which command: the figures' provenance."""
    import platform
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                       f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
            "python": sys.executable, "command": " ".join(["bench/bench_e2e.py", *sys.argv[1:]]),
            "load_avg_at_start": os.getloadavg()}


def print_table(results: dict[str, Any]) -> None:
    for run in results["runs"]:
        print(f"\nlocal[{run['cores']}]: {run['distinct_facts']:,} distinct facts, {run['total_wall_s']} s in all")
        print(f"{'stage':<12}{'wall s':>8}{'s/1M':>8}{'CPU s':>8}{'JVM MB':>8}{'py MB':>8}{'facts/s/core':>14}")
        for name, s in run["stages"].items():
            print(f"{name:<12}{s['wall_s']:>8.1f}{s['s_per_1m_facts']:>8.1f}{s['cpu_s']:>8.1f}{s['peak_jvm_mb']:>8}"
                  f"{s['peak_workers_mb']:>8}{s['facts_per_s_per_core'] or 0:>14,}")
        print(f"{'whole build':<12}{run['total_wall_s']:>8.1f}{run['total_s_per_1m_facts']:>8.1f}")
        idx = run["index"]
        print(f"index: {idx['bytes_per_fact']:.1f} B/fact (table {idx['table_bytes_per_fact']:.1f} + "
              f"B-tree {idx['index_bytes_per_fact']:.1f}), {idx['rows_per_fact']:.3f} rows/fact, "
              f"largest row {idx['largest_row_bytes']:,} B, p99 {idx['p99_row_bytes']:,} B")
        if "total_bytes_per_fact" in idx:
            print(f"provenance: {idx['provenance_bytes_per_fact']:.1f} B/fact; tree + provenance: "
                  f"{idx['total_bytes_per_fact']:.1f} B/fact")
            print(f"facts stored per row (rows): {idx['facts_per_row']}")
        floor = results.get("zstd_floor")
        if floor:
            print(f"zstd floor (sorted token ids, level {floor['zstd_level']}): {floor['bytes_per_fact']:.1f} B/fact "
                  f"({floor['tokens_per_fact']:.1f} tokens/fact); the index holds "
                  f"{idx['bytes_per_fact'] / floor['bytes_per_fact']:.1f}x that")
        for name, s in run["stages"].items():
            task = (s.get("spark") or {}).get("largest_task")
            if task:
                print(f"largest task, {name}: {task['run_s']:.1f} s (median of its Spark stage "
                      f"{task['median_run_s']:.1f} s, {task['tasks_in_stage']} tasks), peak execution memory "
                      f"{task['peak_execution_memory_mb']:.0f} MB, input {task['input_mb']:.0f} MB, shuffle read "
                      f"{task['shuffle_read_mb']:.0f} MB, spilled {task['spill_disk_mb']:.0f} MB: {task['name']}")
        if "peak_mb" in run:
            print(f"peak RSS over the build: JVM {run['peak_mb']['peak_jvm_mb']} MB, Python workers "
                  f"{run['peak_mb']['peak_workers_mb']} MB, Python driver {run['peak_mb']['peak_driver_py_mb']} MB")
        r = run.get("ratios")
        if r:
                print(f"encoder alone: {run['encoder']['facts_per_s']:,.0f} facts/s on {run['cores']} threads; "
                  f"tokenize {r['tokenize_vs_encoder']:.2f}x of it, tokenize+prefix rows+load "
                  f"{r['tokenize_prefix_load_vs_encoder']:.2f}x")
        for w in run.get("walk", {}).get("cursor", []):
            print(f"walk, {w.get('decoder', 'numpy')} decoder, prefetch_leaves={w['prefetch_leaves']}: mean {w['mean_us']:.1f} us, p50 {w['p50_us']:.1f} us, "
                  f"p99 {w['p99_us']:.0f} us per step over {w['steps']:,} steps; "
                  f"{w['round_trips_per_step']:.3f} round trips per step ({w['rows_fetched']:,} rows fetched, "
                  f"{w['rows_decoded']:,} decoded)")
        if "hot_prefix" in run:
            print(f"hot prefix: {run['hot_prefix']}")
    b = results["baselines"].get("bz2")
    if b:
        print(f"\nbz2 alone: {b['wall_s']:.1f} s, {b['mb_per_s']:.0f} MB/s, {b['lines_per_s']:,.0f} lines/s (one core)")


if __name__ == "__main__":
    main()
