"""The README's first command, as a user runs it: `refactx-pipeline demo`.

Runs in a subprocess (its own Spark application, which it stops) against a fresh
database, without ../shared: the example graph and a vocabulary trained on it. The demo's
question, as the demo asks it (the best answer policies, 3 beams), is checked on the shared
sample's facts in memory, without Spark or PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.spark
@pytest.mark.pg
@pytest.mark.slow
def test_demo_without_shared_builds_and_reads_back_facts(pg_dsn, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFACTX__")}
    proc = subprocess.run(
        [sys.executable, "-m", "refactx_pipeline.cli", "demo", "--shared", str(tmp_path / "absent"),
         "--build-root", str(tmp_path / "build"), "--dsn", pg_dsn, "--limit", "20"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for stage in ("parse", "labels", "verbalize", "tokenize", "prefix_rows", "load", "validate", "activate"):
        assert f"  {stage} " in out, f"no counts line for {stage}"
    # facts read back from PostgreSQL, rendered by the verbalize rules
    assert "<Northern Ireland (part of the United Kingdom)> <population> <1810863> ." in out
    assert "<Northern Ireland (part of the United Kingdom)> <coordinate location> <54.6, -6.5> ." in out
    assert (tmp_path / "build" / "wikidata" / "example" / "tokenize" / "counts.json").exists()
    if "asking SmolLM2" in out:  # the generation extra is installed: each fact with its Wikidata ids
        assert "with the best answer policies (prefill-fact,entities-first,relations-first,grounded" in out
        provenance = out.split("where the facts come from:\n", 1)[1]
        assert "    statement: Q" in provenance or "(no fact written)" in provenance, out[-3000:]


@pytest.mark.slow
def test_the_demos_question_is_answered_with_the_object_of_the_stored_fact_it_wrote(sample_fact_texts):
    """The demo's question and answer call, on the shared sample's facts: the reply writes
    Northern Ireland's country and answers that fact's object."""
    pytest.importorskip("torch")
    from refactx_pipeline.cli.commands import DEMO_QUESTION, _answer, format_provenance

    from refactx_index.qa.evaluation import fact_parts
    from refactx_index.qa.models import model_directory
    from refactx_index.qa.policies import BEST_POLICIES
    from refactx_index.tree.memory import MemoryTreeIndex

    index = MemoryTreeIndex.from_facts(sample_fact_texts, str(model_directory("smollm2") / "tokenizer.json"))
    [answer] = _answer(index, [DEMO_QUESTION], 3, 128, BEST_POLICIES)
    stored = [fact_parts(f.text) for f in answer.facts if f.stored]
    country = [f for f in stored if f[0].startswith("Northern Ireland") and f[1] == "country"]
    assert country and all(f.stored for f in answer.facts), answer.reply
    assert {f.text for f in answer.facts} <= set(sample_fact_texts)  # the facts file holds each, verbatim
    assert answer.answer == f"{country[-1][2]}.", answer.reply
    assert country[-1][2].startswith("United Kingdom"), answer.reply
    assert "(no provenance in this build)" in format_provenance(answer)  # an index file records none
