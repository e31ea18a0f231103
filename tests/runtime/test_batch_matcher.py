"""The batch matcher (state per slot, one numpy pass per step) against the row-by-row
reference (``FactMatcher.step_batch``): random walks through the real gpt2 vocabulary's
facts -- triggers, facts followed to their end, repeated facts, free text, tokens the mask
forbade -- give the same mode, prefix, generated facts and allowed ids at every step,
and the one-mask path equals a plain row-by-row mask for 1, 4 and 256 rows."""

from __future__ import annotations

import random

import numpy as np
import pytest

from refactx_index.constraint import batch as batch_module
from refactx_index.constraint.batch import BatchMatcher, StepMask
from refactx_index.constraint.matcher import DEAD, FACT, FREE, FactMatcher
from refactx_index.tree.memory import MemoryTreeIndex, encode_texts
from refactx_index.vocab import open_tokenizer

from ..conftest import tokenizer_dir
from .test_generation import EOS, corporate_facts

torch = pytest.importorskip("torch")

from refactx_index.constraint.masking import MaskApplier  # noqa: E402


def apply_mask_reference(logits: "torch.Tensor", mask: StepMask) -> "torch.Tensor":
    """The plain definition, row by row (tests compare the fast path with it)."""
    import torch

    out = logits.clone()
    for r in mask.rows.tolist():
        allowed = torch.from_numpy(mask.tokens[mask.token_rows == r])
        keep = torch.zeros(out.shape[-1], dtype=torch.bool)
        keep[allowed] = True
        out[r, ~keep.to(out.device)] = float("-inf")
    return out


@pytest.fixture(scope="module")
def tokenizer():
    return open_tokenizer(str(tokenizer_dir("gpt2")))


@pytest.fixture(scope="module", params=[1, 2, 64], ids=lambda t: f"threshold{t}")
def index(request, tokenizer):
    # threshold 1 and 2: many small rows, so walks cross into other rows often
    return MemoryTreeIndex.from_facts(corporate_facts(), tokenizer, threshold=request.param)


def _trigger(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(t, add_special_tokens=False).ids for t in ("Fact:", " Fact:")]


def _choose(rng: random.Random, allowed: np.ndarray | None, free_pool: list[int],
            trigger: list[int], pending: list[int]) -> int:
    """A token as a sampling model would write it: mostly what the mask allows."""
    if pending:
        return pending.pop(0)
    if allowed is not None:
        if allowed.size and rng.random() < 0.97:
            return int(allowed[rng.randrange(allowed.size)])
        return rng.choice([EOS, rng.choice(free_pool)])  # a forced end, or a mask ignored
    roll = rng.random()
    if roll < 0.35:
        pending.extend(trigger[1:])
        return trigger[0]
    return rng.choice(free_pool)


def _same(bm: BatchMatcher, slot: int, st, ref: FactMatcher) -> None:
    mode = bm.mode_of(slot)
    assert mode == st.mode, (slot, mode, st)
    assert bm.generated(slot) == list(st.done)
    if st.mode == FACT:
        assert bm.fact_prefix(slot) == st.prefix
        assert bool(bm.ends[slot]) == st.ends
    mask = bm.mask(np.asarray([slot]))
    expected = ref.allowed(st)
    if expected is None:
        assert mask.empty
    else:
        assert mask.rows.tolist() == [0]
        assert mask.tokens.tolist() == expected.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_random_walks_equal_the_reference(index, tokenizer, seed):
    rng = random.Random(seed)
    trigger = _trigger(tokenizer)
    ref = FactMatcher(index, trigger, [EOS])
    bm = BatchMatcher(FactMatcher(index, trigger, [EOS]), capacity=2, arena_nodes=64)
    free_pool = [tokenizer.encode(w, add_special_tokens=False).ids[0]
                 for w in (" the", " and", ".", "\n", " Answer", " <", " Acme")]
    rows = 9
    prompts = [tokenizer.encode(p, add_special_tokens=False).ids for p in
               ["Question one. Fact:", "Q", "Fact: <Acme", "Fact:", "x Fact:", "Hi", "Fact:",
                "Fact", "Two Fact:"]]
    slots = np.asarray(rng.sample(range(40), rows))  # slots need not be 0..n-1
    bm.add(slots, prompts)
    states = ref.start_batch(prompts)
    histories = [list(p) for p in prompts]
    pending: list[list[int]] = [[] for _ in range(rows)]
    seen = {FREE: 0, FACT: 0, DEAD: 0}
    for _ in range(120):
        for i, st in enumerate(states):
            _same(bm, int(slots[i]), st, ref)
            seen[st.mode] += 1
            if st.mode == DEAD and rng.random() < 0.5:  # a new request in the same slot
                bm.add([int(slots[i])], [prompts[i]])
                states[i] = ref.start_batch([prompts[i]])[0]
                histories[i] = list(prompts[i])
                _same(bm, int(slots[i]), states[i], ref)
        tokens = [_choose(rng, ref.allowed(st), free_pool, trigger[1], pending[i])
                  for i, st in enumerate(states)]
        for i, tok in enumerate(tokens):
            histories[i].append(tok)
        tails = [h[-ref.tail_length:] for h in histories]
        states = ref.step_batch(states, tokens, tails)
        bm.step(slots, np.asarray(tokens))
    assert seen[FACT] > 100 and seen[FREE] > 50
    assert sum(len(st.done) for st in states) > 5  # facts ended, some repeated prefixes
    assert bm.arena.size > 0


def test_beams_move_and_swap_keep_each_slots_state(index, tokenizer):
    trigger = _trigger(tokenizer)
    ref = FactMatcher(index, trigger, [EOS])
    bm = BatchMatcher(FactMatcher(index, trigger, [EOS]))
    prompt = tokenizer.encode("Fact:", add_special_tokens=False).ids
    bm.add([0, 1, 2], [prompt] * 3)
    fact = encode_texts(tokenizer, [" " + corporate_facts()[0]])[0]
    other = encode_texts(tokenizer, [" " + corporate_facts()[5]])[0]
    bm.step(np.asarray([0, 1, 2]), np.asarray([fact[0], other[0], fact[0]]))
    bm.step(np.asarray([0, 1, 2]), np.asarray([fact[1], other[1], fact[1]]))
    bm.gather(np.asarray([1, 1, 0]))  # beams: rows 0 and 1 continue old row 1, row 2 old row 0
    assert bm.fact_prefix(0) == bm.fact_prefix(1) == tuple(other[:2])
    assert bm.fact_prefix(2) == tuple(fact[:2])
    bm.move(2, 5, swap=True)
    assert bm.fact_prefix(5) == tuple(fact[:2]) and bm.mode_of(2) == FREE
    bm.move(5, 3)
    assert bm.fact_prefix(3) == tuple(fact[:2]) and bm.mode_of(5) == FREE
    st = ref.scan(prompt + list(fact[:2]), len(prompt))
    assert bm.mask(np.asarray([3])).tokens.tolist() == ref.allowed(st).tolist()


def test_a_prompt_ending_inside_a_fact_starts_there(index, tokenizer):
    trigger = _trigger(tokenizer)
    bm = BatchMatcher(FactMatcher(index, trigger, [EOS]))
    fact = encode_texts(tokenizer, [" " + corporate_facts()[0]])[0]
    prompt = tokenizer.encode("Q. Fact:", add_special_tokens=False).ids + list(fact[:3])
    bm.add([0], [prompt], in_fact=[True])
    assert bm.mode_of(0) == FACT and bm.fact_prefix(0) == tuple(fact[:3])
    assert fact[3] in bm.mask(np.asarray([0])).tokens.tolist()
    bm.add([1], [prompt])  # not said: the prompt is context, the row is free
    assert bm.mode_of(1) == FREE
    with pytest.raises(ValueError, match="not a prefix of a stored fact"):
        bm.add([2], [tokenizer.encode("Fact: <Nobody", add_special_tokens=False).ids], in_fact=[True])


def test_tree_ids_beyond_the_vocabulary_are_left_out_and_force_eos(tokenizer):
    small = MemoryTreeIndex.from_sequences([(60000, 1), (60001, 2), (7, 8)])
    bm = BatchMatcher(FactMatcher(small, _trigger(tokenizer), [EOS]))
    bm.add([0], [tokenizer.encode("Fact:", add_special_tokens=False).ids])
    assert bm.mask(np.asarray([0]), vocab_size=50257).tokens.tolist() == [7]
    bm.step(np.asarray([0]), np.asarray([7]))
    assert bm.mask(np.asarray([0]), vocab_size=50257).tokens.tolist() == [8]
    only_big = MemoryTreeIndex.from_sequences([(60000, 1)])
    bm = BatchMatcher(FactMatcher(only_big, _trigger(tokenizer), [EOS]))
    bm.add([0], [tokenizer.encode("Fact:", add_special_tokens=False).ids])
    mask = bm.mask(np.asarray([0]), vocab_size=50257)
    assert mask.rows.tolist() == [0] and mask.tokens.tolist() == [EOS]


@pytest.mark.parametrize("rows", [1, 4, 256])
def test_one_mask_per_step_equals_the_row_by_row_reference(index, tokenizer, rows):
    trigger = _trigger(tokenizer)
    bm = BatchMatcher(FactMatcher(index, trigger, [EOS]))
    facts = encode_texts(tokenizer, [" " + f for f in corporate_facts()])
    rng = random.Random(rows)
    prompt = tokenizer.encode("Fact:", add_special_tokens=False).ids
    slots = np.arange(rows)
    # a third of the rows free text, the rest inside a fact at various depths
    prompts = [prompt if i % 3 else tokenizer.encode("Hello", add_special_tokens=False).ids
               for i in range(rows)]
    bm.add(slots, prompts)
    walks = [rng.choice(facts) for _ in range(rows)]
    for step in range(3):
        toks = np.asarray([w[step] if i % 3 else 13 for i, w in enumerate(walks)])
        bm.step(slots, toks)
    mask = bm.mask(slots, vocab_size=50257)
    assert mask.rows.size == len([i for i in range(rows) if i % 3])
    logits = torch.randn(rows, 50257)
    expected = apply_mask_reference(logits, mask)
    got = MaskApplier()(logits.clone(), mask)
    assert torch.equal(got, expected)
    # the torch path (what an accelerator runs), here on CPU tensors
    applier = MaskApplier("cpu")
    assert torch.equal(applier._apply_torch(logits.clone(), mask), expected)
    assert applier.copies == 1 and applier.kernels == 3  # whatever the number of rows


# --------------------------------------------------------------------------- compiled and numpy steps

def test_the_compiled_step_is_installed():
    """The extension is optional at install (no compiler: numpy steps), so a build that
    silently lost it would only be slower: the project's own install must have it."""
    import os

    from refactx_index.constraint import batch
    assert "compiled" in batch.STEPPERS, "refactx_index.constraint._step was not built"
    assert batch.STEPPER == os.environ.get("REFACTX_MATCHER", "compiled")


def _eos_of(tok) -> int:
    for name in ("<|endoftext|>", "<|end_of_text|>", "</s>"):
        if tok.token_to_id(name) is not None:
            return tok.token_to_id(name)
    raise AssertionError("no end-of-sequence token")


@pytest.fixture(scope="module")
def vocabulary_indexes():
    """Per shared vocabulary: its tokenizer, an index of the corporate facts in rows of one
    node's threshold (walks cross rows often), its triggers and end of sequence."""
    from ..conftest import VOCABULARIES

    out = {}
    for name in VOCABULARIES:
        tok = open_tokenizer(str(tokenizer_dir(name)))
        index = MemoryTreeIndex.from_facts(corporate_facts(), tok, threshold=2)
        facts = encode_texts(tok, [" " + f for f in corporate_facts()])
        out[name] = (tok, index, _trigger(tok), _eos_of(tok), facts)
    return out


def _canonical(bm: BatchMatcher, slots: np.ndarray, vocab_size: int | None):
    mask = bm.mask(slots, vocab_size)
    states = [(bm.mode_of(int(s)), bm.fact_prefix(int(s)), bool(bm.ends[int(s)]), bm.generated(int(s)))
              for s in slots.tolist()]
    return states, mask.rows.tolist(), mask.token_rows.tolist(), mask.tokens.tolist()


@pytest.mark.skipif("compiled" not in batch_module.STEPPERS,
                    reason="refactx_index.constraint._step is not built here")
@pytest.mark.parametrize("vocabulary", ["qwen2.5", "llama3", "mistral-7b-v0.1", "phi-3-mini", "gpt2"])
def test_the_compiled_and_numpy_steps_agree_on_random_walks(vocabulary_indexes, vocabulary):
    """The same states, generated facts and flat masks at every step, on walks that enter
    facts, follow them (mostly the allowed ids, sometimes a forbidden one or the end of
    sequence), repeat them, cross rows, reuse slots, and cut the vocabulary below tree ids."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    tok, index, trigger, eos, facts = vocabulary_indexes[vocabulary]
    vocab = tok.get_vocab_size(with_added_tokens=True)
    free_pool = [tok.encode(w, add_special_tokens=False).ids[0] for w in (" the", ".", "\n", " <", " Acme")]
    prompts = [tok.encode(p, add_special_tokens=False).ids for p in ("Q. Fact:", "Hi", "Fact:", "x")]
    cut = int(np.median([t for f in facts for t in f]))  # a vocabulary without half the tree's ids

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 12), width=st.sampled_from([None, vocab, cut]))
    def walk(seed, rows, width):
        rng = random.Random(seed)
        slots = np.asarray(rng.sample(range(3 * rows), rows), dtype=np.int64)
        pair = [BatchMatcher(FactMatcher(index, trigger, [eos]), capacity=2, arena_nodes=48, stepper=s)
                for s in ("compiled", "numpy")]
        starts = [prompts[rng.randrange(len(prompts))] for _ in range(rows)]
        for bm in pair:
            bm.add(slots, starts)
        pending: list[list[int]] = [[] for _ in range(rows)]
        for _ in range(40):
            got, expected = (_canonical(bm, slots, width) for bm in pair)
            assert got == expected
            mask = pair[1].mask(slots, width)
            tokens = []
            for i in range(rows):
                allowed = np.asarray(mask.tokens[mask.token_rows == i]) if i in mask.rows else None
                tokens.append(_choose(rng, allowed, free_pool + [eos], trigger[1], pending[i]))
            if rng.random() < 0.05:  # a request ends and another takes its slot
                i = rng.randrange(rows)
                for bm in pair:
                    bm.add([int(slots[i])], [starts[i]])
                pending[i] = []
            for bm in pair:
                bm.step(slots, np.asarray(tokens))
        assert _canonical(pair[0], slots, width) == _canonical(pair[1], slots, width)

    walk()


@pytest.mark.skipif("compiled" not in batch_module.STEPPERS,
                    reason="refactx_index.constraint._step is not built here")
def test_a_compiled_step_of_rows_outside_a_fact_allocates_no_arrays(index, tokenizer):
    """256 rows of free text, stepped and masked: a few Python objects, no array sized by
    the rows (numpy's step copies each row's history: 8 bytes x its length x 256 rows)."""
    import tracemalloc

    def peak_bytes(stepper: str) -> int:
        bm = BatchMatcher(FactMatcher(index, _trigger(tokenizer), [EOS]), capacity=256, stepper=stepper)
        slots = np.arange(256)
        bm.add(slots, [tokenizer.encode("Hello", add_special_tokens=False).ids] * 256)
        word = np.full(256, tokenizer.encode(" the", add_special_tokens=False).ids[0])
        bm.step(slots, word)
        bm.mask(slots)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            for _ in range(5):
                bm.step(slots, word)
                assert bm.mask(slots).empty
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        assert bm.mode_of(0) == FREE
        return peak

    assert peak_bytes("numpy") > 256 * 8
    assert peak_bytes("compiled") < 1024
