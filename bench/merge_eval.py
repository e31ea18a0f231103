"""One MetaQA figure from several ``bench/bench_eval.py --sets metaqa`` runs (split by hop or
variant to fit a machine's time), each answer scored again by ``refactx_index.qa.evaluation``.

    .venv/bin/python bench/merge_eval.py --out docs/figures/eval-metaqa-dev-gemma3 \\
        "LLM-only=free/unconstrained" "constrained, free=free/constrained" \\
        "constrained, grounded=grounded/constrained" -- PART.json [PART.json ...]

Each ``LABEL=[MODEL:]VARIANT/MODE`` names a row group of the figure: the answers of ``VARIANT``
(a key of a part's ``variants``) in ``MODE`` (``constrained`` or ``unconstrained``), from every
part that has them and, with ``MODEL:``, whose ``--model`` was ``MODEL`` (their questions must not
overlap). Two models in one figure:

    .venv/bin/python bench/merge_eval.py --out docs/figures/eval-metaqa-dev \
        "SmolLM2 LLM-only=smollm2:free/unconstrained" "Gemma LLM-only=gemma3-270m:free/unconstrained" ...
        -- PART.json [PART.json ...]
 Written: ``OUT.json`` (each part's date,
commit, machine and command; the summary per label; every answer), ``OUT.md`` and ``OUT.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from refactx_index.qa.evaluation import Scored, markdown_table, write_outputs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the figure's path, without suffix")
    parser.add_argument("groups", nargs="+", help="LABEL=[MODEL:]VARIANT/MODE ... -- PART.json ...")
    args = parser.parse_args(argv)
    groups = [g for g in args.groups if "=" in g]  # LABEL=[MODEL:]VARIANT/MODE; the rest are parts
    after = [g for g in args.groups if "=" not in g]
    parts = [json.loads(Path(p).read_text(encoding="utf-8")) for p in after]
    if not parts:
        parser.error("no part to merge (PART.json after --)")
    results: dict[str, list[Scored]] = {}
    for group in groups:
        label, _, where = group.partition("=")
        model, _, where = where.rpartition(":")
        variant, _, mode = where.partition("/")
        rows, seen = [], set()
        for part, path in zip(parts, after):
            if model and part.get("model") != model:
                continue
            for row in part.get("variants", {}).get(variant, {}).get("answers", {}).get(mode, []):
                if row["id"] in seen:
                    sys.exit(f"{path}: question {row['id']} of {variant}/{mode} is in an earlier part too")
                seen.add(row["id"])
                rows.append(Scored(**row))
        if not rows:
            sys.exit(f"no answers of {model + ':' if model else ''}{variant}/{mode} in the parts")
        results[label] = rows
    keep = ("date", "commit", "machine", "command", "model", "beams", "max_new_tokens", "batch_size", "per_hop",
            "hops", "seed", "questions", "index_facts")
    meta = {"benchmark": "MetaQA dev", "groups": groups,
            "parts": [{"file": Path(p).name, **{k: part.get(k) for k in keep},
                       "seconds": {v: d.get("seconds") for v, d in part.get("variants", {}).items()}}
                      for part, p in zip(parts, after)],
            "prompts": {part.get("model"): part.get("prompt") for part in parts}, "questions_file": "MetaQA dev (../shared/data/metaqa)"}
    summary = write_outputs(results, args.out, meta, plot_groups=["all", "1-hop", "2-hop", "3-hop"])
    print(markdown_table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
