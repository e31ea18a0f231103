"""The fact constraint as an SGLang grammar backend, through SGLang's own grammar classes:
registered with ``register_grammar_backend``, grammars made and cached by the base backend's
key, future and copy calls, masks filled by ``fill_vocab_mask_batched`` and applied by
``GrammarMask`` -- against the row-by-row reference matcher (``FactMatcher.scan``) over
thousands of random row steps, with rollbacks and requests ending and starting.

SGLang's engine itself does not run on this CPU (its release pins a CUDA build of torch,
flashinfer and sgl-kernel); its grammar modules import where the ``sglang`` wheel is
installed without its dependencies, beside the few modules it imports (``./dev setup`` does
it: docs/runtime.md, "SGLang"). Where they do not import, this file is skipped and says why.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
base = pytest.importorskip(
    "sglang.srt.constrained.base_grammar_backend",
    reason="SGLang's grammar classes are not importable here (./dev setup installs them: "
           "docs/runtime.md, 'SGLang')")

from refactx_index.constraint.matcher import FactMatcher  # noqa: E402
from refactx_index.tree.memory import MemoryTreeIndex  # noqa: E402

from ..conftest import tokenizer_dir  # noqa: E402
from .test_generation import EOS, corporate_facts  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_dir("gpt2") / "tokenizer.json"))


@pytest.fixture(scope="module")
def backend(tokenizer):
    from refactx_index.engines.sglang import BACKEND_NAME, register

    index = MemoryTreeIndex.from_facts(corporate_facts(), tokenizer, threshold=2)  # rows crossed often
    register({"corp": index})
    create = base.GRAMMAR_BACKEND_REGISTRY[BACKEND_NAME]
    return create(None, tokenizer, len(tokenizer), {EOS})


def _grammar(backend, spec: str, prompt: list[int]):
    """What SGLang's grammar manager does for a request: its key, then a cached copy or a
    future compiled on the backend's worker thread (whose copy is cached)."""
    key = backend.get_request_grammar_key(("ebnf", spec), input_ids=prompt, thinking_budget=None)
    value, hit = backend.get_cached_or_future_value(key, False)
    if hit:
        return value
    grammar = value.result()
    if not isinstance(grammar, base.InvalidGrammarObject):
        backend.set_cache(key, grammar.copy())
    return grammar


@pytest.mark.slow
def test_the_backend_never_allows_what_the_matcher_forbids(backend, tokenizer):
    ref = FactMatcher(backend.matchers["corp"].index, backend.matchers["corp"].matcher.triggers, [EOS])
    vocab = len(tokenizer)
    rng = random.Random(0)
    prompts = [tokenizer.encode(p, add_special_tokens=False) for p in
               ["Question one. Fact:", "Hi", "Fact: <Acme", "x Fact:", "Two Fact:", "Q"]]
    trigger = tokenizer.encode(" Fact:", add_special_tokens=False)
    free_pool = [tokenizer.encode(w, add_special_tokens=False)[0] for w in (" the", ".", "\n", " <", " Acme")]
    rows = 8
    starts = [rng.choice(prompts) for _ in range(rows)]
    grammars = [_grammar(backend, "refactx:corp", p) for p in starts]
    written: list[list[int]] = [[] for _ in range(rows)]
    states = [ref.scan(p, len(p)) for p in starts]
    checked = constrained = rollbacks = 0
    logits = torch.zeros(rows, vocab)
    for _ in range(300):
        mask = grammars[0].allocate_vocab_mask(vocab, rows, "cpu")
        grammars[0].fill_vocab_mask_batched([base.GrammarRow(i, g) for i, g in enumerate(grammars)], mask)
        logits.zero_()
        base.GrammarMask(grammars[0], grammars[0].move_vocab_mask(mask, "cpu")).apply(logits)
        finite = np.isfinite(logits.numpy())
        for i in range(rows):
            st = states[i]
            allowed = ref.allowed(st)
            if allowed is None:
                assert finite[i].all()
            else:
                assert np.flatnonzero(finite[i]).tolist() == sorted(allowed.tolist()), (i, st)
                constrained += 1
            checked += 1
            if allowed is not None and allowed.size and rng.random() < 0.97:
                tok = int(allowed[rng.randrange(allowed.size)])
            elif allowed is None and rng.random() < 0.3:
                tok = trigger[0]
            else:
                tok = rng.choice(free_pool + [EOS] + (trigger[1:] if written[i][-1:] == trigger[:1] else []))
            grammars[i].accept_token(tok)
            written[i].append(tok)
            ids = starts[i] + written[i]
            states[i] = ref.step_batch([st], [tok], [ids[-ref.tail_length:]])[0]
            if rng.random() < 0.03 and written[i]:  # speculative tokens refused: the last k undone
                k = rng.randint(1, min(3, len(written[i])))
                grammars[i].rollback(k)
                del written[i][-k:]
                states[i] = ref.scan(starts[i] + written[i], len(starts[i]))
                rollbacks += 1
            if rng.random() < 0.02 or len(written[i]) > 120:  # a request ends, another takes its row
                starts[i] = rng.choice(prompts)
                grammars[i] = _grammar(backend, "refactx:corp", starts[i])
                written[i] = []
                states[i] = ref.scan(starts[i], len(starts[i]))
    assert checked == 2400 and constrained > 600 and rollbacks > 10


def test_a_prompt_inside_a_fact_and_unknown_grammars(backend, tokenizer):
    fact = tokenizer.encode(" " + corporate_facts()[0], add_special_tokens=False)
    prompt = tokenizer.encode("Q. Fact:", add_special_tokens=False) + fact[:3]
    grammar = _grammar(backend, "refactx:corp:in_fact", prompt)
    mask = grammar.allocate_vocab_mask(len(tokenizer), 1, "cpu")
    grammar.fill_vocab_mask(mask, 0)
    logits = torch.zeros(1, len(tokenizer))
    grammar.apply_vocab_mask(logits, mask)
    assert fact[3] in torch.isfinite(logits[0]).nonzero().flatten().tolist()
    assert torch.isfinite(logits[0]).sum() < 10
    unknown = _grammar(backend, "refactx:nowhere", prompt)
    assert isinstance(unknown, base.InvalidGrammarObject) and "nowhere" in unknown.error_message
    not_a_fact = _grammar(backend, "refactx:corp:in_fact",
                          tokenizer.encode("Fact: <Nobody", add_special_tokens=False))
    assert isinstance(not_a_fact, base.InvalidGrammarObject)
    assert isinstance(_grammar(backend, "root ::= \"x\"", prompt), base.InvalidGrammarObject)
