"""The progress of a build on stderr (``refactx-pipeline build``, ``demo``): a bar on a terminal,
plain lines elsewhere, and one summary line of counts per stage."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Sequence

# counts shown in the per-stage summary line, when a stage reports them
_SUMMARY_KEYS = (
    "lines_in", "lines", "rows_in", "statements", "terms", "properties", "sitelinks", "labels",
    "facts", "distinct_facts", "encoded", "reused", "rows", "rejected", "rejects", "build_id",
)


def _flatten(counts: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(counts, dict):
        for key, value in counts.items():
            out.update(_flatten(value, f"{prefix}{key}."))
    else:
        out[prefix[:-1]] = counts
    return out


def summary(counts: dict[str, Any]) -> str:
    """A stage's counts in one line: the known keys, else the first few."""
    flat = _flatten(counts)
    shown = [f"{k}={v}" for k, v in flat.items() if k.rsplit(".", 1)[-1] in _SUMMARY_KEYS]
    if not shown:
        shown = [f"{k}={v}" for k, v in list(flat.items())[:8]]
    return ", ".join(shown[:14])


def _spark_status_tracker():
    """The status tracker of the Spark session the build started (or was given), or None
    before it starts one: ``build`` starts Spark only when a stage needs it, after the
    progress display has begun."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    return spark.sparkContext.statusTracker() if spark is not None else None


PROGRESS_INTERVAL_S = 30.0  # a plain progress line this often while a stage runs (no terminal)


class BuildProgress:
    """Progress of a build on stderr: a tqdm bar with the running stage's Spark tasks on a
    terminal; elsewhere (CI logs, Airflow, a file) one line per stage start and end and a
    Spark task count every ``PROGRESS_INTERVAL_S``, never a redrawn bar."""

    def __init__(self, stages: Sequence[str], out=None, interactive: bool | None = None,
                 interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.out = out if out is not None else sys.stderr
        if interactive is None:
            interactive = bool(getattr(self.out, "isatty", lambda: False)())
        self.tracker = None  # the Spark session's, once the build has started one
        self.stage = ""
        self.started = time.monotonic()
        self.bar = None
        if interactive:
            from tqdm import tqdm

            self.bar = tqdm(total=len(stages), desc="build", unit="stage", file=self.out, leave=True)
        self.interval_s = 0.5 if self.bar is not None else interval_s
        self.stop_event = threading.Event()
        self.watcher = threading.Thread(target=self._watch, name="build-progress", daemon=True)

    def __enter__(self) -> "BuildProgress":
        self.watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.watcher.join()
        if self.bar is not None:
            self.bar.close()

    def on_stage(self, stage: str, result) -> None:
        if result is None:
            if self.tracker is None:
                self.tracker = _spark_status_tracker()
            self.stage, self.started = stage, time.monotonic()
            if self.bar is None:
                self._line(f"  {stage:<12} started")
            return
        # nothing runs until the next stage starts, and Spark may be stopped after the last
        self.stage = ""
        line = f"  {stage:<12} {result.seconds:6.1f}s  {summary(result.counts)}"
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(line, file=self.out)
        else:
            self._line(line)

    def _line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def _spark_tasks(self) -> tuple[int, int]:
        done = total = 0
        if self.tracker is None:
            return 0, 0
        for stage_id in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return done, total

    def _watch(self) -> None:
        """A running stage of a full dump takes hours: show its Spark tasks as it goes."""
        while not self.stop_event.wait(self.interval_s):
            if not self.stage:
                continue
            done, total = self._spark_tasks()
            tasks = f"spark tasks {done}/{total}" if total else "no spark tasks running"
            if self.bar is not None:
                self.bar.set_postfix_str(f"{self.stage}: {tasks}", refresh=True)
            else:
                self._line(f"  {self.stage:<12} running {time.monotonic() - self.started:6.0f}s, {tasks}")
