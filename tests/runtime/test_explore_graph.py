"""Graph exploration from the tree (entities by label start, an entity's relations, the
objects of an entity and a relation, facts paged) on the shared sample's facts as the
verbalize stage writes them, against a plain scan of those fact texts that the test
computes itself."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from refactx_index.tree.explore import entities, facts_page, objects, relations
from refactx_index.tree.memory import MemoryTreeIndex
from refactx_index.vocab import open_tokenizer

from ..conftest import tokenizer_dir

FACT = re.compile(r"^<(.*?)> <(.*?)> <(.*)> \.$")


@pytest.fixture(scope="module")
def graph(sample_fact_texts):
    path = str(tokenizer_dir("qwen2.5"))
    triples = [FACT.match(t).groups() for t in sample_fact_texts]  # type: ignore[union-attr]
    return MemoryTreeIndex.from_facts(sample_fact_texts, path), open_tokenizer(path), triples


def _as_dict(labels) -> dict[str, int]:
    return {x.label: x.facts for x in labels}


def test_relations_and_objects_equal_a_plain_scan(graph):
    index, tok, triples = graph
    by_subject = Counter(s for s, _, _ in triples)
    busiest = [s for s, _ in by_subject.most_common(8)]
    northern = next(s for s in by_subject if s.startswith("Northern Ireland"))
    for subject in busiest + [northern]:
        expected = Counter(p for s, p, _ in triples if s == subject)
        got = relations(index, tok, subject)
        assert _as_dict(got) == dict(expected), subject
        assert [x.facts for x in got] == sorted(expected.values(), reverse=True)  # ranked
        for relation in expected:
            objs = Counter(o for s, p, o in triples if s == subject and p == relation)
            assert _as_dict(objects(index, tok, subject, relation)) == dict(objs), (subject, relation)


def test_entities_by_label_start_with_their_fact_counts(graph):
    index, tok, triples = graph
    for start in ("North", "Germ", "Ja"):
        expected = Counter(s for s, _, _ in triples if s.startswith(start))
        assert expected, start
        assert _as_dict(entities(index, tok, start, limit=None)) == dict(expected), start
    assert len(entities(index, tok, "", limit=5)) == 5


def test_a_count_does_not_enumerate_the_facts_below(graph):
    index, tok, triples = graph
    subject = Counter(s for s, _, _ in triples).most_common(1)[0][0]
    facts_below = sum(1 for s, _, _ in triples if s == subject)
    before = index.stats.lookups
    relations(index, tok, subject)
    relation_lookups = index.stats.lookups - before
    before = index.stats.lookups
    all_facts = facts_page(index, tok, f"<{subject}> <", limit=10_000)
    page_lookups = index.stats.lookups - before
    assert len(all_facts) == facts_below
    assert relation_lookups < page_lookups


def test_facts_are_paged(graph):
    index, tok, triples = graph
    subject = Counter(s for s, _, _ in triples).most_common(1)[0][0]
    whole = facts_page(index, tok, f"<{subject}> <", limit=1000)
    pages = [facts_page(index, tok, f"<{subject}> <", offset=o, limit=3) for o in range(0, len(whole), 3)]
    assert [f for page in pages for f in page] == whole
    assert sorted(whole) == sorted(f"<{s}> <{p}> <{o}> ." for s, p, o in triples if s == subject)
    with pytest.raises(ValueError):
        facts_page(index, tok, "", offset=-1)


def test_the_refactx_command_explores_an_index_file(graph, tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    index, tok, triples = graph
    path = tmp_path / "sample.rfx"
    index.save(path)
    subject = Counter(s for s, _, _ in triples).most_common(1)[0][0]
    refactx = Path(sys.executable).with_name("refactx")
    base = [str(refactx), "explore", "--index-file", str(path), "--vocabulary", str(tokenizer_dir("qwen2.5"))]
    run = subprocess.run(base + ["relations", subject, "--json", "--limit", "100"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = {row["label"]: row["facts"] for row in json.loads(run.stdout)}
    assert got == dict(Counter(p for s, p, _ in triples if s == subject))
    run = subprocess.run(base + ["entities", "Zzzz no such entity"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 3 and run.stdout == ""
    run = subprocess.run(base + ["objects", subject], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "takes 2 text(s)" in run.stderr
    # --tokenizer, the option's name before 0.2.0: the same answer, with a warning naming the new one
    old = [str(refactx), "explore", "--index-file", str(path), "--tokenizer", str(tokenizer_dir("qwen2.5"))]
    run = subprocess.run(old + ["relations", subject, "--json", "--limit", "100"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert {row["label"]: row["facts"] for row in json.loads(run.stdout)} == got
    assert "--tokenizer is deprecated" in run.stderr and "--vocabulary" in run.stderr
    helped = subprocess.run([str(refactx), "explore", "--help"], capture_output=True, text=True, timeout=120)
    assert "--vocabulary" in helped.stdout and "--tokenizer" not in helped.stdout
    run = subprocess.run([str(refactx), "explore", "--index-file", str(path), "relations", subject],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "give --vocabulary" in run.stderr


def test_the_vocabulary_option_takes_a_tokenizer_file_a_model_directory_or_a_gguf():
    from refactx_index.cli import open_vocabulary_argument
    from refactx_index.qa.models import model_directory, packaged_gguf

    directory = model_directory("smollm2")
    from_gguf = open_vocabulary_argument(str(packaged_gguf("smollm2")))
    from_directory = open_vocabulary_argument(str(directory))
    from_file = open_vocabulary_argument(str(directory / "tokenizer.json"))
    assert from_gguf is from_directory  # the model's vocabulary, settled once per process
    assert from_directory.eos_ids and from_directory.logits_size >= from_directory.vocab_size
    assert from_file.sha256 == from_directory.sha256 and from_file.eos_ids == ()
