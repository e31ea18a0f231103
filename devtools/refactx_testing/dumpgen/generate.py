"""Writing a dump: the plan, the chunks rendered and compressed in worker processes, the SQL dumps
and the manifest.
"""

from __future__ import annotations

import bz2
import collections
import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from refactx_testing.dumpgen.shape import (
    CLASS_INDEX,
    CORE_ITEMS,
    DEFAULT_CHUNK_LINES,
    GENERATOR_VERSION,
    HOT_LABEL,
    MANIFEST_FILE,
    PAGE_FILE,
    PAGE_PROPS_FILE,
    SKEW,
    SKEW_FACTS_PER_ITEM,
    TRUTHY_FILE,
    tail_properties,
)
from refactx_testing.dumpgen.basics import Plan
from refactx_testing.dumpgen.render import ChunkRenderer, PRELUDE_STATEMENTS, _prelude_text, _vocab
from refactx_testing.dumpgen.plan import make_plan
from refactx_testing.dumpgen.sqldumps import write_sql_dumps
from refactx_testing.dumpgen.measure import _quantiles

log = logging.getLogger(__name__)


# bz2 compressors, fastest first: one independent stream per chunk, one thread each (the
# chunks are the parallelism). "auto" takes the first one on PATH, else Python's bz2.
COMPRESSORS = {
    "lbzip2": ["lbzip2", "-9", "-n", "1", "-c"],
    "pbzip2": ["pbzip2", "-9", "-p1", "-c"],
    "bzip2": ["bzip2", "-9", "-c"],
    "python": [],
}


def resolve_compressor(name: str) -> str:
    if name == "auto":
        return next((c for c in ("lbzip2", "pbzip2") if shutil.which(c)), "python")
    if name not in COMPRESSORS:
        raise ValueError(f"compressor {name!r}: expected auto or one of {', '.join(COMPRESSORS)}")
    if name != "python" and not shutil.which(name):
        raise ValueError(f"compressor {name!r} is not on PATH")
    return name


def compress(data: bytes, compressor: str) -> bytes:
    """One bz2 stream of ``data`` (level 9, the dumps' own)."""
    if compressor == "python":
        return bz2.compress(data, 9)
    return subprocess.run(COMPRESSORS[compressor], input=data, stdout=subprocess.PIPE, check=True).stdout


_COMPRESSOR = "python"
_PLAN: Plan | None = None  # the plan of this worker process (_worker_init)


def _worker_init(lines: int, seed: int, skew_facts: int, line_mix: str, chunk_lines: int, compressor: str,
                 preset: str = "dense") -> None:
    global _PLAN, _COMPRESSOR
    _PLAN = make_plan(lines, seed, skew_facts, line_mix, chunk_lines, preset)
    _COMPRESSOR = compressor


def _render_chunk(chunk: int) -> tuple[int, bytes, dict[str, Any]]:
    assert _PLAN is not None
    cpu = time.process_time()
    data, info = ChunkRenderer(_PLAN, chunk).render()
    info["cpu_render_s"] = time.process_time() - cpu
    cpu = time.process_time()
    packed = compress(data, _COMPRESSOR)
    info["cpu_bz2_s"] = time.process_time() - cpu  # of this process: an external compressor's is not seen
    return chunk, packed, info


# ====================================================================== generate


def generate(out_dir: str | os.PathLike, lines: int, seed: int = 0, skew_facts: int = 0,
             line_mix: str = "dense", chunk_lines: int = DEFAULT_CHUNK_LINES,
             workers: int | None = None, compressor: str = "auto", preset: str = "dense") -> dict[str, Any]:
    """Write a dump of about ``lines`` N-Triples lines (module docstring) into ``out_dir``;
    return the manifest (also written as ``manifest.json``, last: its presence means done).

    ``workers``: processes rendering and compressing chunks (default: the CPUs this process
    may use); the bytes do not depend on it. They are started with ``spawn`` (never a fork
    of a process holding Spark's threads), so a script calling this needs the usual
    ``if __name__ == "__main__":`` guard. ``compressor``: ``auto`` (lbzip2 or pbzip2 when on
    PATH, else Python's bz2), or one of ``COMPRESSORS``; the manifest names the one used,
    and the same compressor gives the same bytes. ``preset``: what the texts and values are
    drawn from (``shape.PRESETS``: ``dense``, the default, or ``realistic``, with vocabularies
    that keep growing with the dump); the manifest records it."""
    started = time.monotonic()
    compressor = resolve_compressor(compressor)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_FILE).unlink(missing_ok=True)
    plan = make_plan(lines, seed, skew_facts, line_mix, chunk_lines, preset)
    log.info("dumpgen: %s items (%s skew) in %d chunks for %s lines, seed %d", f"{plan.items:,}",
             f"{int((plan.cls == SKEW).sum()):,}", len(plan.chunks), f"{lines:,}", seed)
    if not workers:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, min(workers, len(plan.chunks)))

    totals: collections.Counter[str] = collections.Counter()
    cpu: collections.Counter[str] = collections.Counter()  # CPU seconds of the workers, by step
    by_dtype: collections.Counter[str] = collections.Counter()
    filtered: collections.Counter[str] = collections.Counter()
    hostile: collections.Counter[str] = collections.Counter()
    kept_subjects, kept_refs, kept_core, stmts_per_item = [], [], [], []
    sl_items, sl_labels, sl_descs = [], [], []
    vocab = _vocab(tail_properties(lines))
    prelude = _prelude_text(vocab).encode("utf-8")
    truthy = out / TRUTHY_FILE
    tmp = truthy.with_suffix(".part")
    with open(tmp, "wb") as fh:
        fh.write(compress(prelude, compressor))
        totals["lines"] += prelude.count(b"\n")
        totals["bytes"] += len(prelude)
        args = (lines, seed, skew_facts, line_mix, chunk_lines, compressor, preset)
        if workers == 1:
            _worker_init(*args)
            results: Iterator = map(_render_chunk, range(len(plan.chunks)))
            pool = None
        else:
            ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads (Spark)
            pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init, initargs=args)
            results = pool.map(_render_chunk, range(len(plan.chunks)))
        try:
            for chunk, packed, info in results:
                fh.write(packed)
                for key in ("lines", "bytes", "statements", "unknown_value", "no_value", "kept_statements"):
                    totals[key] += info[key]
                totals["compressed"] += len(packed)
                cpu["render"] += info["cpu_render_s"]
                cpu["bz2"] += info["cpu_bz2_s"]
                by_dtype.update(info["statements_by_datatype"])
                filtered.update(info["filtered_by_datatype"])
                hostile.update(info["hostile"])
                kept_subjects.append(info["kept_subjects"])
                kept_refs.append(info["kept_ref_objects"])
                kept_core.append(info["kept_core_objects"])
                stmts_per_item.append(info["stmts_per_item"])
                sl_items.append(info["sitelink_items"])
                sl_labels += info["sitelink_labels"]
                sl_descs += info["sitelink_descs"]
                elapsed = time.monotonic() - started
                log.info("dumpgen: chunk %d/%d, %s lines so far, %.0f s (%.0f lines/s)", chunk + 1,
                         len(plan.chunks), f"{totals['lines']:,}", elapsed, totals["lines"] / max(elapsed, 1e-9))
        finally:
            if pool is not None:
                pool.shutdown()
    tmp.replace(truthy)

    sql = write_sql_dumps(out, plan, vocab, {"items": np.concatenate(sl_items), "labels": sl_labels,
                                      "descs": sl_descs}, seed)

    # expected facts: statements kept + descriptions and short descriptions of the entities they mention
    disp = plan.displayable()
    entities = np.union1d(np.concatenate(kept_subjects), np.concatenate(kept_refs)).astype(np.int64)
    core_mentioned = np.unique(np.concatenate(kept_core)).tolist()
    desc_facts = int(plan.en_desc[entities].sum()) + len(core_mentioned)
    main_titled = plan.sitelinked & (plan.cls != CLASS_INDEX["category"])
    short_facts = int((main_titled & plan.shortdesc)[entities].sum()) + sum(
        1 for q in core_mentioned if vocab.core_by_qid[q].title)
    spi = np.concatenate(stmts_per_item)
    skew_items = int((plan.cls == SKEW).sum())
    prop_types = len(vocab.props)
    manifest = {
        "generator": "refactx_testing.dumpgen",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "lines_requested": lines,
        "skew_facts": skew_facts,
        "line_mix": line_mix,
        "preset": preset,
        "chunk_lines": chunk_lines,
        "compressor": compressor,
        "truthy": TRUTHY_FILE,
        "page": PAGE_FILE,
        "page_props": PAGE_PROPS_FILE,
        "lines": totals["lines"],
        "bytes": totals["bytes"],
        "bz2_streams": len(plan.chunks) + 1,
        "items": plan.items + len(CORE_ITEMS),
        "properties": prop_types,
        "statements": totals["statements"],
        "statements_by_datatype": dict(sorted(by_dtype.items(), key=lambda kv: -kv[1])),
        "statements_per_item": _quantiles(spi),
        "hostile_lines": dict(sorted(hostile.items())),
        "skew_items": skew_items,
        "hot_label": HOT_LABEL if skew_items else "",
        "hot_label_facts_at_least": skew_items * SKEW_FACTS_PER_ITEM,
        "sql": sql,
        "expected": {  # the pipeline's default configuration (filter.languages = ["en"])
            "parse": {
                "lines_in": totals["lines"],
                "rejected_by_reason": dict(sorted(hostile.items())),
                "statements_seen": totals["statements"] + PRELUDE_STATEMENTS,
                "statements_filtered_by_reason": {f"datatype_{k}": v for k, v in sorted(filtered.items())},
                "property_types_declared": prop_types,
                "unknown_value": totals["unknown_value"],
                "no_value": totals["no_value"],
            },
            "sitelinks": {"sitelinks": sql["sitelinks"], "rejected_by_reason": sql["rejected"],
                          "dropped_by_reason": sql["dropped"]},
            "labels": {"items_displayable": int(disp.sum()) + len(CORE_ITEMS)},
            # before de-duplication of identical texts: an upper bound, close to the real count
            "facts_at_most": totals["kept_statements"] + desc_facts + short_facts,
            "statement_facts_at_most": totals["kept_statements"],
        },
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    elapsed = time.monotonic() - started
    log.info("dumpgen: %s lines (%.0f MB, %.0f MB bz2), %s items, about %s facts in %.1f s (%.0f lines/s) -> %s",
             f"{totals['lines']:,}", totals["bytes"] / 1e6, totals["compressed"] / 1e6, f"{manifest['items']:,}",
             f"{manifest['expected']['facts_at_most']:,}", elapsed, totals["lines"] / elapsed, out)
    log.info("dumpgen: CPU seconds in the workers: %.1f rendering, %.1f bz2 (%d workers)",
             cpu["render"], cpu["bz2"], workers)
    _LAST_RUN.clear()
    _LAST_RUN.update(wall_s=elapsed, cpu_render_s=cpu["render"], cpu_bz2_s=cpu["bz2"], workers=workers,
                     bytes=totals["bytes"], compressed_bytes=totals["compressed"])
    return manifest


# timings of the last generate() in this process (kept out of the manifest: it must not vary)
_LAST_RUN: dict[str, Any] = {}


def last_run() -> dict[str, Any]:
    """Wall and CPU seconds of the last ``generate`` call in this process (bench/)."""
    return dict(_LAST_RUN)
