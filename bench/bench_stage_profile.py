"""Where a stage spends its time: one pipeline stage run again on a build ``bench_e2e.py`` left,
with Spark's own figures per job and per Spark stage (what the Spark UI shows), read from the
UI's REST API on loopback when the stage is done.

The stage's wall time and the CPU of the JVM and its Python workers (less noisy than the wall
on a shared VM). For each Spark job of the run: its wall time and what triggered it (the call site, e.g.
``collect at prefix_rows.py:412``); for each of its Spark stages: wall time, tasks, the tasks'
summed run time and JVM CPU time, GC, input/output/shuffle bytes. The Python workers' time
(``mapInArrow``) is inside the tasks' run time and not in their JVM CPU time: a stage whose run
time far exceeds its CPU time spends it in Python (or waiting). Jobs that AQE runs side by
side overlap, so their wall times can add up to more than the stage's. The stage's outputs
are overwritten in place (the same content), so the build folder stays usable; it runs in a
fresh JVM, a few seconds slower than inside a whole build.

    .venv/bin/python bench/bench_stage_profile.py prefix_rows            # the realistic 1M build
    .venv/bin/python bench/bench_stage_profile.py verbalize --json bench/out/profile-verbalize.json

A stage's inputs must be there: run ``bench/bench_e2e.py`` (default folder) first, or give the
folders it used (``--work``, ``--cores``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

SPARK_STAGES = ("parse", "sitelinks", "labels", "verbalize", "tokenize", "prefix_rows", "validate")


def rest(ui: str, path: str) -> Any:
    with urllib.request.urlopen(f"{ui}/api/v1/{path}", timeout=30) as response:
        return json.load(response)


def millis(stamp: str | None) -> float | None:
    """Spark's REST time stamps (``2026-11-26T13:47:07.123GMT``) as epoch milliseconds."""
    if not stamp:
        return None
    parsed = datetime.strptime(stamp.replace("GMT", ""), "%Y-%m-%dT%H:%M:%S.%f")
    return parsed.replace(tzinfo=timezone.utc).timestamp() * 1000


def profile(spark, jobs_before: set[int]) -> list[dict[str, Any]]:
    """Every job the stage ran (those not in ``jobs_before``), oldest first, with its stages."""
    ui = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    stages = {(s["stageId"], s["attemptId"]): s for s in rest(ui, f"applications/{app}/stages?details=false")}
    out = []
    for job in sorted(rest(ui, f"applications/{app}/jobs"), key=lambda j: j["jobId"]):
        if job["jobId"] in jobs_before:
            continue
        started, ended = millis(job.get("submissionTime")), millis(job.get("completionTime"))
        entry = {"job": job["jobId"], "name": job["name"], "status": job["status"],
                 "wall_s": round((ended - started) / 1000, 2) if started and ended else None, "stages": []}
        for stage_id in sorted(job["stageIds"]):
            attempts = [s for (sid, _), s in stages.items() if sid == stage_id]
            for s in attempts:
                if s["status"] == "SKIPPED":
                    continue
                s_start, s_end = millis(s.get("submissionTime")), millis(s.get("completionTime"))
                entry["stages"].append({
                    "stage": stage_id, "name": s["name"], "status": s["status"],
                    "wall_s": round((s_end - s_start) / 1000, 2) if s_start and s_end else None,
                    "tasks": s["numTasks"],
                    "task_run_s": round(s["executorRunTime"] / 1000, 2),
                    "task_cpu_s": round(s["executorCpuTime"] / 1e9, 2),
                    "gc_s": round(s.get("jvmGcTime", 0) / 1000, 2),
                    "input_mb": round(s["inputBytes"] / 2**20, 1),
                    "output_mb": round(s["outputBytes"] / 2**20, 1),
                    "shuffle_read_mb": round(s["shuffleReadBytes"] / 2**20, 1),
                    "shuffle_write_mb": round(s["shuffleWriteBytes"] / 2**20, 1),
                    "spill_mb": round((s.get("memoryBytesSpilled", 0)) / 2**20, 1),
                })
        out.append(entry)
    return out


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's descendants now alive: the JVM, its workers."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=SPARK_STAGES, help="the pipeline stage to run again")
    parser.add_argument("--work", default=str(ROOT / "build" / "bench_e2e"), help="bench_e2e.py's folder")
    parser.add_argument("--lines", type=int, default=3_000_000, help="the dump bench_e2e.py generated")
    parser.add_argument("--cores", type=int, default=2, help="local[N]: the build of that run")
    parser.add_argument("--vocab", default="qwen2.5")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="for validate only: the server bench_e2e.py loaded into")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for this run (repeatable), to compare settings on the same stage")
    parser.add_argument("--json", help="write the profile here too")
    args = parser.parse_args()

    from bench_e2e import dump_config
    from refactx_pipeline.common import spark_session
    from refactx_pipeline.orchestration.pipeline import build

    work = Path(args.work)
    dumps = sorted(work.glob(f"dump-*-{args.lines}-*"))
    if not dumps:
        parser.error(f"no dump of {args.lines} lines in {work}: run bench/bench_e2e.py first")
    cfg = dump_config(dumps[-1], work / f"build-local{args.cores}", args.cores, args.vocab)
    conf = {"spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "true"}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--conf {item!r}: KEY=VALUE expected")
        conf[key] = value
    cfg = cfg.updated({"pg.schema": f"bench_e2e_{args.cores}", "spark.conf": conf})
    spark = spark_session(cfg, f"bench_stage_profile_{args.stage}")
    try:
        tracker = spark.sparkContext.statusTracker()
        before = set(tracker.getJobIdsForGroup(None))
        # the CPU of the JVM (every thread: tasks, planning, code generation, the JIT, GC) and of
        # its Python workers: less noisy than the wall on a shared VM (a worker that exits
        # before the stage ends is not counted; parse and labels start none)
        cpu_before = children_cpu()
        started = time.monotonic()
        build(cfg, [args.stage], spark=spark, dsn=args.dsn if args.stage == "validate" else None)
        wall = time.monotonic() - started
        jvm_cpu = children_cpu() - cpu_before
        jobs = profile(spark, before)
    finally:
        spark.stop()

    print(f"\n{args.stage}: {wall:.1f} s wall, {len(jobs)} Spark jobs")
    print(f"JVM and workers' CPU: {jvm_cpu:.1f} s")
    for job in jobs:
        print(f"job {job['job']:>3} {job['wall_s'] or 0:>7.2f} s  {job['name'][:90]}")
        for s in job["stages"]:
            print(f"    stage {s['stage']:>3} {s['wall_s'] or 0:>7.2f} s  {s['tasks']:>4} tasks  run {s['task_run_s']:>7.2f} s"
                  f"  cpu {s['task_cpu_s']:>7.2f} s  gc {s['gc_s']:>5.2f}  in {s['input_mb']:>6.1f} MB"
                  f"  shuffle r/w {s['shuffle_read_mb']:>6.1f}/{s['shuffle_write_mb']:>6.1f} MB"
                  f"  out {s['output_mb']:>6.1f} MB  {s['name'][:50]}")
    accounted = sum(j["wall_s"] or 0 for j in jobs)
    print(f"Spark jobs: {accounted:.1f} s of {wall:.1f} s; the rest is the driver's own work (Python, planning, "
          "counts files)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"stage": args.stage, "conf": args.conf, "wall_s": wall, "jvm_cpu_s": jvm_cpu, "jobs": jobs},
                                              indent=2))


if __name__ == "__main__":
    main()
