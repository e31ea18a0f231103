"""The engine-neutral constraint (requests in slots, one batch matcher per index) under the
batch changes a serving engine makes: requests entering, leaving, moving and swapping
slots between two indexes, checked after every change against the reference matcher
replaying each request's own ids; and unconstrained rows left bit-identical."""

from __future__ import annotations

import random

import numpy as np
import pytest

from refactx_index.engines.core import FactConstraint
from refactx_index.errors import ConfigError
from refactx_index.constraint.matcher import FactMatcher
from refactx_index.tree.memory import MemoryTreeIndex, encode_texts
from refactx_index.vocab import open_tokenizer

from ..conftest import tokenizer_dir
from .test_generation import EOS, corporate_facts

torch = pytest.importorskip("torch")

VOCAB = 50257


@pytest.fixture(scope="module")
def tokenizer():
    return open_tokenizer(str(tokenizer_dir("gpt2")))


@pytest.fixture(scope="module")
def indexes(tokenizer):
    facts = corporate_facts()
    return {"even": MemoryTreeIndex.from_facts(facts[::2], tokenizer, threshold=2),
            "odd": MemoryTreeIndex.from_facts(facts[1::2], tokenizer, threshold=2)}


def test_requests_moving_between_slots_and_indexes_keep_their_own_state(indexes, tokenizer):
    trigger = [tokenizer.encode(t, add_special_tokens=False).ids for t in ("Fact:", " Fact:")]
    constraint = FactConstraint(indexes, trigger, [EOS], vocab_size=VOCAB)
    refs = {name: FactMatcher(ix, trigger, [EOS]) for name, ix in indexes.items()}
    prompts = [tokenizer.encode(p, add_special_tokens=False).ids
               for p in ("Q1. Fact:", "Free text", "Q3\nFact:", "Fact:")]
    rng = random.Random(3)
    live: dict[int, dict] = {}  # slot -> {"index", "prompt", "written"}: the model of the batch
    changes = {"add": 0, "remove": 0, "move": 0, "swap": 0}
    for step in range(240):
        roll = rng.random()
        slots_free = [s for s in range(8) if s not in live]
        if roll < 0.15 and slots_free:
            slot = rng.choice(slots_free)
            req = {"index": rng.choice(["even", "odd", None]), "prompt": rng.choice(prompts), "written": []}
            if req["index"] is not None:
                constraint.add(slot, req["index"], req["prompt"])
            live[slot] = req
            changes["add"] += 1
        elif roll < 0.22 and live:
            slot = rng.choice(sorted(live))
            constraint.remove([slot])
            del live[slot]
            changes["remove"] += 1
        elif roll < 0.32 and live:
            src = rng.choice(sorted(live))
            dst = rng.randrange(8)
            if dst != src:
                swap = dst in live and rng.random() < 0.7
                constraint.move(src, dst, swap=swap)
                a, b = live.pop(src), live.pop(dst, None)
                live[dst] = a
                if swap and b is not None:
                    live[src] = b
                changes["swap" if swap else "move"] += 1
        if not live:
            continue
        rows = np.asarray(sorted(live))
        logits = torch.randn(rows.size, VOCAB)
        before = logits.clone()
        constraint.apply(logits, rows)
        tokens = []
        for r, slot in enumerate(rows.tolist()):
            req = live[slot]
            allowed = torch.isfinite(logits[r]).nonzero().flatten().tolist()
            if req["index"] is None:
                assert torch.equal(logits[r], before[r])  # never touched
                tokens.append(rng.choice([198, 13, 262] + trigger[1]))
                continue
            ref = refs[req["index"]]
            st = ref.scan(req["prompt"] + req["written"], len(req["prompt"]))
            expected = ref.allowed(st)
            if expected is None:
                assert len(allowed) == VOCAB, (slot, st)
                tokens.append(rng.choice([198, 13, 262] + trigger[1]))
            else:
                assert allowed == expected.tolist(), (slot, st)
                tokens.append(rng.choice(allowed))
        for slot, tok in zip(rows.tolist(), tokens):
            live[slot]["written"].append(tok)
        constraint.step(rows, np.asarray(tokens))
    assert all(n >= 4 for n in changes.values()), changes


def test_an_unknown_index_is_refused_and_a_refused_slot_may_only_end(indexes, tokenizer):
    trigger = [tokenizer.encode("Fact:", add_special_tokens=False).ids]
    constraint = FactConstraint(indexes, trigger, [EOS], vocab_size=VOCAB)
    with pytest.raises(KeyError, match="unknown index 'nosuch'"):
        constraint.add(0, "nosuch", [1, 2])
    constraint.refuse(1)
    logits = torch.zeros(2, VOCAB)
    constraint.apply(logits, np.asarray([0, 1]))
    assert torch.isfinite(logits[0]).all()
    assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == [EOS]
    constraint.move(1, 3)  # the refusal follows its request
    logits = torch.zeros(2, VOCAB)
    constraint.apply(logits, np.asarray([1, 3]))
    assert torch.isfinite(logits[0]).all() and torch.isfinite(logits[1]).sum() == 1


def test_facts_generated_by_a_request_are_not_repeated_after_it_moves(indexes, tokenizer):
    trigger = [tokenizer.encode(t, add_special_tokens=False).ids for t in ("Fact:", " Fact:")]
    constraint = FactConstraint(indexes, trigger, [EOS], vocab_size=VOCAB)
    fact = encode_texts(tokenizer, [" " + corporate_facts()[0]])[0]
    prompt = tokenizer.encode("Fact:", add_special_tokens=False).ids
    constraint.add(0, "even", prompt)
    for tok in list(fact) + [198] + trigger[1]:
        constraint.step(np.asarray([0]), np.asarray([tok]))
    constraint.move(0, 5)
    ref = FactMatcher(indexes["even"], trigger, [EOS])
    written = list(prompt) + list(fact) + [198] + trigger[1]
    for tok in fact:  # the same fact again: cut off where no other fact shares its path
        expected = ref.allowed(ref.scan(written, len(prompt)))
        assert constraint.mask(np.asarray([5])).tokens.tolist() == expected.tolist()
        if tok not in expected.tolist():
            break
        constraint.step(np.asarray([5]), np.asarray([tok]))
        written.append(tok)
    else:
        raise AssertionError("the fact could be written twice after its request moved")


def test_each_index_opens_at_its_own_trigger(indexes, tokenizer):
    """Triggers per index (a fact index and a path index in one engine): a prompt ending at
    one index's trigger is constrained there and left free over the other; a missing one is
    refused."""
    fact = [tokenizer.encode("Fact:", add_special_tokens=False).ids]
    path = [tokenizer.encode("Path:", add_special_tokens=False).ids]
    constraint = FactConstraint(indexes, {"even": fact, "odd": path}, [EOS], vocab_size=VOCAB)
    for slot, (index, prompt) in enumerate([("even", "Fact:"), ("even", "Path:"), ("odd", "Path:"), ("odd", "Fact:")]):
        constraint.add(slot, index, tokenizer.encode(prompt, add_special_tokens=False).ids)
    logits = torch.zeros(4, VOCAB)
    constraint.apply(logits, np.asarray([0, 1, 2, 3]))
    constrained = [bool((~torch.isfinite(row)).any()) for row in logits]
    assert constrained == [True, False, True, False]
    first = {name: sorted({seq[0] for seq in (encode_texts(tokenizer, [" " + f])[0] for f in facts)})
             for name, facts in (("even", corporate_facts()[::2]), ("odd", corporate_facts()[1::2]))}
    assert torch.isfinite(logits[2]).nonzero().flatten().tolist() == first["odd"]
    with pytest.raises(ConfigError, match="no trigger for the indexes \\['odd'\\]"):
        FactConstraint(indexes, {"even": fact}, [EOS], vocab_size=VOCAB)
