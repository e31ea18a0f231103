"""A request reads one build from its first token to the check of its facts: an activation
in the middle of it serves the next requests only, and a drop of its build is a
``BuildRetired``, never an answer from another build ("a request stays on the
build it started on"; "an index whose build is dropped mid-request")."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from refactx_index import open_index
from refactx_index.constraint.batch import BatchMatcher
from refactx_index.errors import BuildRetired
from refactx_index.constraint.matcher import FactMatcher
from refactx_pipeline.stages.activate import apply_retention

from ..pgtree import load_tree
from ..treedata import expected_next, random_sequences

pytestmark = pytest.mark.pg

TRIGGER, EOS = 900, 901  # outside random_sequences' alphabet


def children(step) -> dict[int, int]:
    return dict(zip(step.tokens.tolist(), step.leaves.tolist()))


def first_tokens(batch: BatchMatcher, slots: list[int]) -> list[list[int]]:
    mask = batch.mask(np.asarray(slots))
    return [mask.tokens[mask.token_rows == r].tolist() for r in range(len(slots))]


def test_lookups_on_a_pinned_build_answer_from_it_after_an_activation(pg_dsn):
    old, new = random_sequences(seed=31, n=120), random_sequences(seed=32, n=120)
    first = load_tree(pg_dsn, "kg", old, threshold=1)
    with open_index(pg_dsn, "kg", follow=False) as index:
        pinned = index.serving_build()
        second = load_tree(pg_dsn, "kg", new, threshold=1)
        assert index.refresh() and index.info.build_id == second
        assert pinned.info.build_id == first
        prefixes = sorted({s[:k] for s in old | new for k in range(len(s) + 1)})
        on_pinned = index.next_tokens_batch(prefixes, build=pinned)
        served = index.next_tokens_batch(prefixes)
        for p, a, b in zip(prefixes, on_pinned, served):
            assert (children(a), a.ends) == expected_next(old, p)
            assert (children(b), b.ends) == expected_next(new, p)
        assert index.root(pinned).build is pinned and index.root().build.info.build_id == second


def test_batch_matcher_slots_start_every_fact_on_the_build_they_entered_on(pg_dsn):
    old = {(1, 2, 3), (1, 4)}
    new = {(5, 6), (7,)}
    first = load_tree(pg_dsn, "kg", old, threshold=1)
    with open_index(pg_dsn, "kg", follow=False) as index:
        batch = BatchMatcher(FactMatcher(index, [[TRIGGER]], [EOS]))
        batch.add([0], [[42]])  # free text: no fact yet, but the request has started
        second = load_tree(pg_dsn, "kg", new, threshold=1)
        index.refresh()
        batch.add([1], [[42]])  # a request arriving after the activation
        batch.step(np.asarray([0, 1]), np.asarray([TRIGGER, TRIGGER]))
        assert first_tokens(batch, [0, 1]) == [[1], [5, 7]]
        # the first request finishes a fact and starts another: still on its build
        batch.step(np.asarray([0]), np.asarray([1]))
        batch.step(np.asarray([0]), np.asarray([4]))
        batch.step(np.asarray([0]), np.asarray([TRIGGER]))
        assert first_tokens(batch, [0]) == [[1]]
        assert batch.build[0].info.build_id == first and batch.build[1].info.build_id == second


def test_a_request_whose_build_is_dropped_gets_build_retired_and_the_retry_reads_the_active_build(pg_dsn):
    old, new = random_sequences(seed=33, n=80), random_sequences(seed=34, n=80)
    first = load_tree(pg_dsn, "kg", old, threshold=1)
    with open_index(pg_dsn, "kg", follow=False) as index:
        pinned = index.serving_build()  # a request that has read nothing yet
        second = load_tree(pg_dsn, "kg", new, threshold=1)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert first in apply_retention(conn, "refactx", "kg", keep=1, grace_s=0)
        with pytest.raises(BuildRetired) as caught:
            index.root(pinned)
        assert caught.value.build_id == first
        with pytest.raises(BuildRetired):
            index.next_tokens_batch([()], build=pinned)
        retry = index.serving_build()  # the index moved on by itself (follow is off)
        assert retry.info.build_id == second
        assert children(index.root(retry).next_tokens()) == expected_next(new, ())[0]


@pytest.mark.slow
def test_a_build_activated_mid_generation_serves_the_next_request_not_this_one(pg_dsn, sample_fact_texts):
    """The real model asks about Germany on a build that has its facts; the first token it
    writes activates a build without them. The request's facts come from, and are checked
    against, the build it started on; the next request reads the new build."""
    from refactx_index.tree.index import tokenizer_sha256
    from refactx_index.qa.models import load_model
    from refactx_index.server.backend_transformers import TransformersEngine
    from refactx_index.server.engine import Job, encode_chat
    from refactx_index.prompting.prompt import Prompt
    from refactx_index.vocab import encode_facts, open_tokenizer

    loaded = load_model("smollm2")
    tokenizer_file = str(loaded.tokenizer_file)
    encoded = encode_facts(open_tokenizer(tokenizer_file), sample_fact_texts, ())
    facts = {tuple(encoded.ids(i)): text for i, text in enumerate(sample_fact_texts)}
    without_germany = {ids for ids, text in facts.items() if "Germany" not in text}
    assert len(without_germany) < len(facts)
    catalog = dict(vocabulary="smollm2", vocabulary_sha256=tokenizer_sha256(tokenizer_file),
                   vocab_size=len(loaded.tokenizer), threshold=8)
    first = load_tree(pg_dsn, "sample", facts, **catalog)
    with open_index(pg_dsn, "sample", follow=False) as index:
        engine = TransformersEngine(loaded, {"sample": index}, max_batch=4)
        try:
            prompt = encode_chat(loaded.tokenizer, Prompt().messages("What is the capital of Germany?"))
            activated: list[int] = []

            def activate_once(_token: int) -> None:
                if not activated:
                    activated.append(load_tree(pg_dsn, "sample", without_germany, **catalog))
                    index.refresh()

            during = Job(prompt_ids=prompt, index="sample", max_new_tokens=48, on_token=activate_once)
            _run(engine, during)
            assert activated and index.info.build_id == activated[0]
            assert during.error is None and during.build_id == first
            assert during.facts and any("Germany" in f.text for f in during.facts)
            assert all(f.stored and f.token_ids in facts for f in during.facts if f.complete)

            after = Job(prompt_ids=prompt, index="sample", max_new_tokens=48)
            _run(engine, after)
            assert after.error is None and after.build_id == activated[0]
            assert all(f.stored and f.token_ids in without_germany for f in after.facts if f.complete)
        finally:
            engine.close()


def _run(engine, job) -> None:
    import threading

    done = threading.Event()
    job.on_done = lambda _job: done.set()
    engine.submit(job)
    assert done.wait(300), "the engine did not finish the request"
