"""Constrained generation with a tiny randomly initialised causal LM and the real gpt2
vocabulary: facts written after the trigger are stored facts, without repeats, in
batches and with beam search."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ..conftest import tokenizer_dir

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from refactx_index.engines.transformers import DEAD, FACT, FREE, RefactxLogitsProcessor  # noqa: E402
from refactx_index.tree.memory import MemoryTreeIndex, encode_texts  # noqa: E402
from refactx_index.vocab import open_tokenizer  # noqa: E402

EOS = 50256
COMPANIES = ["Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Stark Industries"]
PROPERTIES = [("founded in", ["1990", "1989", "2001", "1999", "1977", "2010"]),
              ("headquarters", ["Paris", "Berlin", "Austin", "Raccoon City", "Palo Alto", "New York"]),
              ("industry", ["tools", "energy", "software", "pharmaceuticals", "search", "defense"])]


def corporate_facts() -> list[str]:
    """30 facts of a small corporate graph; one is a token-level prefix of another."""
    facts = [f"<{c}> <{p}> <{vals[i]}>" for i, c in enumerate(COMPANIES) for p, vals in PROPERTIES]
    facts += [f"<{c}> <chief executive> <{ceo}>" for c, ceo in
              zip(COMPANIES, ["Jane Roe", "Hank Scorpio", "Bill Lumbergh", "Albert Wesker",
                              "Gavin Belson", "Tony Stark"])]
    facts += ["<Acme Corp> <slogan> <We make things>",
              "<Acme Corp> <slogan> <We make things> <since 1990>"]
    facts += [f"<{a}> <competitor> <{b}>" for a, b in
              [("Globex", "Initech"), ("Initech", "Globex"), ("Hooli", "Acme Corp"),
               ("Umbrella", "Stark Industries")]]
    assert len(facts) == len(set(facts)) == 30
    return facts


@pytest.fixture(scope="module")
def tokenizer():
    return open_tokenizer(str(tokenizer_dir("gpt2")))


@pytest.fixture(scope="module")
def index(tokenizer):
    return MemoryTreeIndex.from_facts(corporate_facts(), tokenizer, threshold=2)


@pytest.fixture(scope="module")
def stored(index, tokenizer) -> set[tuple[int, ...]]:
    return {tuple(s) for s in encode_texts(tokenizer, [" " + f for f in corporate_facts()])}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50257, n_positions=1024, n_embd=32, n_layer=2,
                                     n_head=2, bos_token_id=EOS, eos_token_id=EOS)
    return transformers.GPT2LMHeadModel(config).eval()


def facts_after_triggers(ids: list[int], trigger: tuple[int, ...], stored,
                         start_inside: bool = False) -> list[tuple]:
    """Independent reading of a row: after each trigger (and at its start, when its prompt
    ended with one), the longest run of tokens that stays on the tree. Returns those runs
    with whether the row ended inside them (each must be a stored fact, or the row ends
    inside the tree)."""
    prefixes = {s[:i] for s in stored for i in range(len(s) + 1)}
    runs = []
    k = len(trigger)
    starts = [i + k for i in range(len(ids) - k + 1) if tuple(ids[i:i + k]) == trigger]
    for start in ([0] if start_inside else []) + starts:
        run: tuple[int, ...] = ()
        for tok in ids[start:]:
            if run + (tok,) not in prefixes:
                break
            run += (tok,)
        runs.append((run, start + len(run) == len(ids)))
    return runs


class ForceTrigger(transformers.LogitsProcessor):
    """Test driver: whenever a row is in free text, write "\\nFact:" (a random model
    would not), so that facts follow one another."""

    def __init__(self, constrained: RefactxLogitsProcessor, trigger: list[int]) -> None:
        self.constrained, self.trigger = constrained, trigger

    def __call__(self, input_ids, scores):
        for r, row in enumerate(input_ids.tolist()):
            if self.constrained.state(row).mode != FREE:
                continue
            k = next((k for k in range(len(self.trigger) - 1, 0, -1)
                      if row[-k:] == self.trigger[:k]), 0)
            scores[r] = float("-inf")
            scores[r, self.trigger[k]] = 0.0
        return scores


def generate(model, input_ids, attention_mask, processors, **kwargs):
    return model.generate(
        input_ids=input_ids, attention_mask=attention_mask,
        logits_processor=transformers.LogitsProcessorList(processors),
        pad_token_id=EOS, eos_token_id=EOS, **kwargs,
    )


def test_trigger_tokens_and_states_follow_the_ids(index, tokenizer, stored):
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    assert (29054, 25) in proc.trigger_ids and (19020, 25) in proc.trigger_ids
    prompt = tokenizer.encode("Known facts. Fact:", add_special_tokens=False).ids
    p = len(prompt)
    st = proc.state(prompt, prompt_length=p)  # a prompt that ends with the trigger constrains
    assert st.mode == FACT and st.prefix == () and st.constrained
    assert proc.state(prompt[:-1], prompt_length=p - 1).mode == FREE
    fact = sorted(stored)[0]
    st = proc.state(prompt + list(fact), prompt_length=p)
    assert st.mode == FACT and st.ends and not st.constrained  # may end: released
    after = proc.state(prompt + list(fact) + [198], prompt_length=p)
    assert after.mode == FREE and after.done == (fact,)
    # the same fact cannot end again in the same row
    head = prompt + list(fact) + [198] + prompt[-2:]
    for j in range(len(fact)):  # somewhere along the path the repeat is cut off
        st = proc.state(head + list(fact[:j]), prompt_length=p)
        assert st.mode == FACT and st.constrained
        if fact[j] not in st.allowed.tolist():
            break
    else:
        raise AssertionError("the fact could be written twice")
    # only an engine ignoring the mask can write the blocked token: a dead end
    assert proc.state(head + list(fact[: j + 1]), prompt_length=p).mode == DEAD


def _left_padded(rows: list[list[int]]) -> "torch.Tensor":
    width = max(map(len, rows))
    return torch.tensor([[EOS] * (width - len(r)) + r for r in rows])


def test_mask_is_applied_in_place_to_constrained_rows_only(index, tokenizer, stored):
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    fact_row = tokenizer.encode("x Fact:", add_special_tokens=False).ids
    free_row = tokenizer.encode("x Fac t", add_special_tokens=False).ids
    ids = _left_padded([fact_row, free_row])
    scores = torch.randn(2, 50257)
    before = scores.clone()
    out = proc(ids, scores)
    assert out.data_ptr() == scores.data_ptr()
    assert torch.equal(out[1], before[1])
    allowed = torch.isfinite(out[0]).nonzero().flatten().tolist()
    assert allowed == sorted({s[0] for s in stored})
    assert torch.equal(out[0, allowed], before[0, allowed])


def test_triggers_facts_and_dead_ends_inside_the_prompt_never_constrain(index, tokenizer, stored, caplog):
    """The reported case: a system prompt that explains "Fact:" and examples whose Fact:
    lines are not in the tree; the row starts free, and no warning is logged."""
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    prompt = tokenizer.encode(
        'Write "Fact:". to fetch a fact.\nQ: Who founded Nobody Inc?\nFact: <Nobody Inc> <founder> '
        '<Jane> .\nFact: <Nobody', add_special_tokens=False).ids
    scores = torch.zeros(1, 50257)
    with caplog.at_level(logging.INFO, logger="refactx_index"):
        proc(torch.tensor([prompt]), scores)
    assert proc.state(prompt).mode == FREE
    assert torch.isfinite(scores).all()  # nothing masked
    assert caplog.text == ""


def test_facts_written_by_the_prompt_do_not_count_as_generated(index, tokenizer, stored):
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    fact = sorted(stored)[0]
    trigger = tokenizer.encode(" Fact:", add_special_tokens=False).ids
    prompt = tokenizer.encode("Example:", add_special_tokens=False).ids + trigger + list(fact) + [198]
    st = proc.state(prompt + trigger + list(fact), prompt_length=len(prompt))
    assert st.mode == FACT and st.ends and st.done == ()  # the example fact may be written again


def test_padded_batch_and_reordered_beams_follow_each_rows_ids(index, tokenizer, stored):
    """Rows of different prompt lengths, left padded; between steps the rows are permuted
    and one is duplicated (as beam search does): each row's mask follows its own ids."""
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    fact = sorted(stored, key=len)[-1]
    prompts = [tokenizer.encode("A longer prompt that ends in a Fact:", add_special_tokens=False).ids,
               tokenizer.encode("Free text", add_special_tokens=False).ids,
               tokenizer.encode("Fact:", add_special_tokens=False).ids]
    ids = _left_padded(prompts)
    width = ids.shape[1]
    proc(ids, torch.zeros(3, 50257))
    assert proc.prompt_length == width
    for step, tok in enumerate(fact[:4]):
        order = [2, 0, 0, 1] if step % 2 == 0 else [1, 2, 3, 0]  # reorder, duplicate, drop
        ids = torch.cat([ids[order], torch.tensor([[tok], [tok], [tok], [198]])], dim=1)
        scores = torch.zeros(4, 50257)
        proc(ids, scores)
        for r in range(4):
            expected = proc.matcher.scan(ids[r].tolist(), width)
            st = proc.state(ids[r])
            assert (st.mode, st.prefix, st.done) == (expected.mode, expected.prefix, expected.done)
            allowed = torch.isfinite(scores[r]).nonzero().flatten()
            if st.constrained:
                assert allowed.tolist() == proc.matcher.allowed(st).tolist()
            else:
                assert allowed.numel() == 50257
        # the prompt-length boundary holds: the free-text prompt row never entered a fact
    assert proc.prompt_length == width


def test_one_index_round_trip_per_step_for_the_whole_batch(index, tokenizer, stored):
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    prompts = [tokenizer.encode(p, add_special_tokens=False).ids
               for p in ("One. Fact:", "Two, Fact:", "Three and Fact:", "Fact:")]
    ids = _left_padded(prompts)
    index.cache.clear()
    before = index.stats.round_trips
    proc(ids, torch.zeros(4, 50257))
    assert index.stats.round_trips - before == 1  # the root, once for four rows
    walks = sorted(stored)[:4]
    for step in range(4):
        ids = torch.cat([ids, torch.tensor([[w[step]] for w in walks])], dim=1)
        before = index.stats.round_trips
        proc(ids, torch.zeros(4, 50257))
        assert index.stats.round_trips - before <= 1


def test_a_processor_serves_successive_generations(index, tokenizer, stored):
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    first = torch.tensor([tokenizer.encode("Fact:", add_special_tokens=False).ids])
    proc(first, torch.zeros(1, 50257))
    assert proc.state(first[0]).mode == FACT
    second = torch.tensor([tokenizer.encode("No trigger here, Fact: <Acme", add_special_tokens=False).ids])
    scores = torch.zeros(1, 50257)
    proc(second, scores)  # not a continuation of the first: a new prompt
    assert proc.prompt_length == second.shape[1]
    assert proc.state(second[0]).mode == FREE and torch.isfinite(scores).all()


def test_all_facts_generated_goes_on_as_free_text(tokenizer, caplog):
    facts = ["<Acme Corp> <founded in> <1990>"]
    small = MemoryTreeIndex.from_facts(facts, tokenizer)
    proc = RefactxLogitsProcessor(small, tokenizer, eos_token_id=EOS)
    fact = encode_texts(tokenizer, [" " + facts[0]])[0]
    prompt = tokenizer.encode("Q", add_special_tokens=False).ids
    trigger = tokenizer.encode(" Fact:", add_special_tokens=False).ids
    with caplog.at_level(logging.INFO, logger="refactx_index.constraint.matcher"):
        st = proc.state(prompt + trigger + fact + [198] + trigger, prompt_length=len(prompt))
    assert st.mode == FREE and not st.constrained and st.done == (tuple(fact),)
    assert "already generated" in caplog.text


def test_tree_ids_beyond_the_model_vocabulary_force_eos(tokenizer):
    small = MemoryTreeIndex.from_sequences([(60000, 1), (60001, 2)])
    proc = RefactxLogitsProcessor(small, tokenizer, eos_token_id=EOS)
    prompt = tokenizer.encode("Fact:", add_special_tokens=False).ids
    scores = torch.zeros(1, 50257)
    proc(torch.tensor([prompt]), scores)
    assert torch.isfinite(scores[0]).nonzero().flatten().tolist() == [EOS]


def test_every_fact_is_stored_and_thirty_in_a_row_never_repeat(model, index, tokenizer, stored):
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    trigger = tokenizer.encode("\nFact:", add_special_tokens=False).ids
    prompt = tokenizer.encode("Corporate facts:\nFact:", add_special_tokens=False).ids
    ids = torch.tensor([prompt])
    out = generate(model, ids, torch.ones_like(ids), [proc, ForceTrigger(proc, trigger)],
                   do_sample=False, max_new_tokens=900)
    row = out[0].tolist()
    runs = facts_after_triggers(row, tuple(trigger[1:]), stored)
    facts = [run for run, _ in runs if run]
    assert len(facts) == 30, len(facts)
    assert all(f in stored for f in facts)
    assert len(set(facts)) == 30  # no duplicates: the whole graph, each fact once
    acme = tokenizer.encode(" <Acme Corp> <slogan> <We make things>", add_special_tokens=False).ids
    assert tuple(acme) in facts  # a fact that is a prefix of another was produced ...
    assert any(len(f) > len(acme) and f[:len(acme)] == tuple(acme) for f in facts)  # ... and the longer one
    # every later trigger finds nothing left: the row goes on as free text
    assert runs[-1][0] == () and proc.state(row).mode == FREE


def test_batch_of_two_prompts_with_three_beams_stays_in_the_tree(model, index, tokenizer, stored):
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    prompts = ["Here is what I know about companies. Fact:", "Fact:"]
    encoded = [tokenizer.encode(p, add_special_tokens=False).ids for p in prompts]
    width = max(map(len, encoded))
    ids = torch.tensor([[EOS] * (width - len(e)) + e for e in encoded])  # left padding
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
    out = generate(model, ids, mask, [proc], num_beams=3, num_return_sequences=3,
                   do_sample=False, max_new_tokens=25)
    assert out.shape[0] == 6
    triggers = [(19020, 25), (29054, 25)]
    for r, row in enumerate(out.tolist()):
        trigger = triggers[r // 3]
        runs = facts_after_triggers(row[:width], trigger, stored)
        assert runs, "the prompt's trigger is found"
        generated = row[width:]
        while generated and generated[-1] == EOS:
            generated.pop()
        prefixes = {s[:i] for s in stored for i in range(len(s) + 1)}
        run: tuple[int, ...] = ()
        for tok in generated:
            if run + (tok,) not in prefixes:
                break
            run += (tok,)
        # the row either stopped inside the tree or left it exactly at a stored fact
        assert run == tuple(generated) or run in stored, (r, generated)
        assert len(run) >= 1


def test_prefix_fact_is_produced_when_the_model_ends_there(model, tokenizer):
    short = " <Acme Corp> <slogan> <We make things>"
    index = MemoryTreeIndex.from_facts([short.strip(), short.strip() + " <since 1990>"], tokenizer)
    proc = RefactxLogitsProcessor(index, tokenizer, eos_token_id=EOS)
    short_ids = tuple(tokenizer.encode(short, add_special_tokens=False).ids)

    class EndAtFact(transformers.LogitsProcessor):  # the "model" prefers to stop where it may
        def __call__(self, input_ids, scores):
            for r, row in enumerate(input_ids.tolist()):
                st = proc.state(row)
                if st.mode == FACT and st.ends:
                    scores[r, EOS] = float("inf")
            return scores

    prompt = torch.tensor([tokenizer.encode("Fact:", add_special_tokens=False).ids])
    out = generate(model, prompt, torch.ones_like(prompt), [proc, EndAtFact()],
                   do_sample=False, max_new_tokens=40)
    generated = tuple(out[0, prompt.shape[1]:].tolist())
    assert generated == short_ids + (EOS,)
    assert proc.state(out[0].tolist()).done == (short_ids,)


def test_generation_against_postgres_index(pg_dsn, model, tokenizer, stored):
    from refactx_index import open_index

    from ..pgdb import pipeline_tree_loader

    load_tree = pipeline_tree_loader()

    load_tree(pg_dsn, "corp", stored, threshold=2, vocab_size=50257)
    with open_index(pg_dsn, "corp") as pg_index:
        proc = RefactxLogitsProcessor(pg_index, tokenizer, eos_token_id=EOS)
        prompt = torch.tensor([tokenizer.encode("Fact:", add_special_tokens=False).ids])
        out = generate(model, prompt, torch.ones_like(prompt), [proc], do_sample=True,
                       top_k=0, max_new_tokens=20)
        generated = out[0, prompt.shape[1]:].tolist()
        st = proc.state(out[0].tolist())
        fact = st.prefix if st.mode == FACT else st.done[0]
        assert fact in stored or any(s[:len(fact)] == fact for s in stored)
        assert generated[: len(fact)] == list(fact)
