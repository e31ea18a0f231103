"""The page `refactx serve` answers at `/`, on an index of a million facts: how long it takes to
load in a real browser, and how fast its type-ahead is answered.

Builds (once, kept under bench/out/) an index file of ``--facts`` facts of the realistic shape
``bench_walk.realistic_facts`` draws (Wikidata-like labels, a long tail of statements per
subject, hot objects) with SmolLM2's vocabulary, serves it with ``refactx serve --index-file``
on a loopback port, and drives headless Chromium (Debian's chromium and chromium-driver, as the
browser tests do) with Selenium:

- page load: ``--loads`` fresh loads of ``/``; for each, the navigation's ``loadEventEnd`` and
  the time until the index panel shows the index (its data fetched and drawn);
- type-ahead: ``--queries`` prefixes of subjects' labels (1 to 6 characters, seeded), each
  typed into the entity box; the browser's own timing of each ``entities?q=`` request it sent
  (Resource Timing: request start to response end), and the same requests from Python (httpx)
  as a second view.

Prints medians and p95 (and writes ``--json``). Targets of the page's issue: a load in at most
1 s, type-ahead answered in at most 100 ms at p95 (on this 2-core machine).

    .venv/bin/python bench/bench_page.py [--facts 1120000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_server import free_port, start_serve  # noqa: E402
from bench.bench_walk import realistic_facts  # noqa: E402


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def build_index(n: int, seed: int, out: Path) -> tuple[Path, dict[str, int], list[str]]:
    """The index file of ``realistic_facts(n, seed)`` (built once), its facts and rows, and its
    subjects' labels."""
    from refactx_index.qa.models import model_directory
    from refactx_index.tree.memory import MemoryTreeIndex

    facts = realistic_facts(n, seed)
    path = out / f"page-{n}-{seed}.rfx"
    if path.exists():
        info = MemoryTreeIndex.load(path).info
    else:
        started = time.perf_counter()
        index = MemoryTreeIndex.from_facts(facts, str(model_directory("smollm2") / "tokenizer.json"),
                                           name="big")
        index.save(path)
        info = index.info
        print(f"built {path.name}: {info.facts:,} facts, {info.rows:,} rows, "
              f"{path.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    subjects = sorted({f[1:f.index("> <")] for f in facts})
    return path, {"facts": info.facts, "rows": info.rows}, subjects


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def page_loads(driver, url: str, loads: int) -> tuple[list[float], list[float]]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    load_ms, shown_ms = [], []
    for _ in range(loads):
        driver.get("about:blank")
        started = time.perf_counter()
        driver.get(url)
        WebDriverWait(driver, 30).until(
            lambda d: "big" in d.find_element(By.ID, "indexes").text)
        shown_ms.append((time.perf_counter() - started) * 1000)
        load_ms.append(driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;"))
    return load_ms, shown_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=1_120_000,
                        help="facts drawn (default 1.12M: just over 1.0M distinct ones are indexed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json")
    args = parser.parse_args()

    import httpx

    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    index, info, subjects = build_index(args.facts, args.seed, out)
    rng = np.random.default_rng(args.seed)
    prefixes = [subjects[int(i)][:int(k)] for i, k in
                zip(rng.integers(0, len(subjects), args.queries), rng.integers(1, 7, args.queries))]
    port = free_port()
    url, stop = start_serve([str(Path(sys.executable).parent / "refactx"), "serve", "--index-file", f"big={index}",
                             "--port", str(port)], port)
    url += "/"
    driver = browser()
    try:
        load_ms, shown_ms = page_loads(driver, url, args.loads)
        browser_ms: list[float] = []
        driver.get(url)
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(driver, 30).until(lambda d: "big" in d.find_element(By.ID, "indexes").text)
        box = driver.find_element(By.ID, "entity-input")
        for prefix in prefixes:
            driver.execute_script("performance.clearResourceTimings()")
            box.clear()
            box.send_keys(prefix)
            timing = WebDriverWait(driver, 30).until(lambda d: d.execute_script(
                "const e = performance.getEntriesByType('resource').filter(e => e.name.includes('/entities?q=') "
                "&& e.responseEnd > 0); return e.length ? e[e.length - 1].responseEnd - e[e.length - 1].requestStart "
                ": null;"))
            browser_ms.append(float(timing))
        python_ms = []
        with httpx.Client(base_url=url, timeout=120) as client:
            for prefix in prefixes:
                started = time.perf_counter()
                r = client.get("/v1/indexes/big/entities", params={"q": prefix, "limit": 10})
                python_ms.append((time.perf_counter() - started) * 1000)
                r.raise_for_status()
    finally:
        driver.quit()
        stop()

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "command": " ".join(["bench/bench_page.py", *sys.argv[1:]]), "index": info,
        "page_load_ms": {"median": statistics.median(load_ms), "p95": _pct(load_ms, 0.95)},
        "index_panel_shown_ms": {"median": statistics.median(shown_ms), "p95": _pct(shown_ms, 0.95)},
        "typeahead_browser_ms": {"median": statistics.median(browser_ms), "p95": _pct(browser_ms, 0.95)},
        "typeahead_httpx_ms": {"median": statistics.median(python_ms), "p95": _pct(python_ms, 0.95)},
        "typeahead_browser_ms_by_prefix_length": {
            str(k): {"queries": len(ms), "median": statistics.median(ms), "p95": _pct(ms, 0.95)}
            for k in range(1, 7) if (ms := [t for p, t in zip(prefixes, browser_ms) if len(p) == k])},
    }
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
