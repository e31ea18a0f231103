"""Exploring an index by text, and the in-memory index's encoding, on every real vocabulary.

SentencePiece decoders (Mistral, Phi-3) drop the leading space of a whole sequence, and
Phi-3 encodes a lone " <" differently from the same text after ``Fact:``: both must be
handled the way the pipeline's tokenize stage handles them.
"""

from __future__ import annotations

import pytest

from refactx_index.tree.explore import complete, enumerate_facts
from refactx_index.tree.memory import MemoryTreeIndex
from refactx_index.vocab import encode_facts, open_vocabulary

from ..conftest import VOCABULARIES, tokenizer_dir

FACTS = [
    "<Northern Ireland> <country> <United Kingdom> .",
    "<Northern Ireland> <capital> <Belfast> .",
    "<Northern Ireland> <population> <1810863> .",
    "<Belfast> <country> <United Kingdom> .",
]


@pytest.fixture(params=VOCABULARIES)
def vocab_and_index(request):
    path = str(tokenizer_dir(request.param))
    return open_vocabulary(request.param, path), MemoryTreeIndex.from_facts(FACTS, path)


def test_memory_index_stores_the_pipelines_ids(vocab_and_index):
    vocab, index = vocab_and_index
    encoded = encode_facts(vocab.tokenizer(), FACTS, vocab.forbidden_ids)
    stored = {ids for _, ids in enumerate_facts(index, vocab.tokenizer())}
    assert stored == {tuple(encoded.ids(i)) for i in range(len(FACTS))}
    assert index.info.vocabulary_sha256 == vocab.sha256


def test_completions_and_facts_by_text(vocab_and_index):
    vocab, index = vocab_and_index
    tok = vocab.tokenizer()
    got = dict(complete(index, tok, "<Northern Ireland> <", limit=10))
    assert got == {
        "country> <United Kingdom> .": 1,
        "capital> <Belfast> .": 1,
        "population> <1810863> .": 1,
    }
    facts = sorted(text for text, _ in enumerate_facts(index, tok, "<Northern Ireland> <"))
    assert facts == sorted(FACTS[:3])


def test_a_long_text_that_matches_nothing_is_answered_in_a_few_lookups_and_quoted_short():
    """20,000 characters of an unmatched text: the walk stops where the text leaves the tree
    (it decoded every prefix before), and the command quotes only the text's head."""
    from refactx_index.display import format_completions

    path = str(tokenizer_dir("gpt2"))
    index = MemoryTreeIndex.from_facts(FACTS, path)
    tok = open_vocabulary("gpt2", path).tokenizer()
    text = "<Northern Ireland> <" + "zq " * 6700
    before = index.stats.lookups
    shown, facts = format_completions(index, tok, text, 10)
    assert facts == 0
    assert index.stats.lookups - before < 40
    assert len(shown) < 300 and "20,120 characters" in shown


# sixty subjects under one node " <": names that share heads, and characters that some
# vocabularies spell in byte tokens (a byte alone decodes to part of a character)
MANY = [f"<{name}> <country> <{place}> ." for name, place in zip(
    [f"{head}{tail}" for head in ("Ab", "Amélie", "Zoë", "Łódź", "東京", "Ω", "Tom", "T", "1999", "Ürün")
     for tail in ("", " Hanks", "s", " (film)", "-", " 2")],
    ["Aland", "Belfast", "Łódź", "日本", "Ωmega", "Ürümqi"] * 10)]


def test_a_wide_node_is_walked_by_its_childrens_own_text_with_the_same_result(vocab_and_index, monkeypatch):
    """A node with more than ``_FEW_CHILDREN`` children has them filtered by each token's own
    text before any decoding (here every node, at 0): every completion equals the full walk's."""
    import refactx_index.tree.explore as explore

    vocab, _ = vocab_and_index
    index = MemoryTreeIndex.from_facts(MANY, vocab.path)
    monkeypatch.setattr(explore, "_FEW_CHILDREN", 0)
    texts = ["<", "<A", "<Amé", "<Zo", "<Zoë", "<Łó", "<東", "<東京> <", "<Ω", "<T", "<Tom", "<19", "<Ür", "<Q"]
    filtered = [complete(index, vocab, t, limit=100) for t in texts]
    monkeypatch.setattr(explore, "_FEW_CHILDREN", 10**9)
    assert filtered == [complete(index, vocab, t, limit=100) for t in texts]
    assert sum(map(len, filtered)) > len(texts)


def test_continuation_texts_are_each_ids_continuation(vocab_and_index):
    vocab, _ = vocab_and_index
    texts = vocab.continuation_texts
    assert len(texts) == vocab.vocab_size
    step = max(1, vocab.vocab_size // 2000)
    for i in range(0, vocab.vocab_size, step):
        assert texts[i] == vocab.continuation([i]), i


def test_question_entities_are_those_of_the_full_walk(vocab_and_index, monkeypatch):
    """The batch lookup that rules spans out (vocabularies that encode facts by pieces) and the
    filtered walk find the entities that a walk of every span's text finds."""
    import refactx_index.qa.ask as ask
    import refactx_index.tree.explore as explore

    vocab, _ = vocab_and_index
    index = MemoryTreeIndex.from_facts(MANY, vocab.path)
    monkeypatch.setattr(explore, "_FEW_CHILDREN", 0)
    questions = ["where is Amélie (film) from", "which country is Tom Hanks in", "is Zoë in Łódź or in 東京 2",
                 "what about Ab- and 1999 s", "T", "who is Ürün"]
    found = [ask.question_entities(index, vocab, q) for q in questions]
    monkeypatch.setattr(ask, "_spans_off_tree", lambda *args: set())
    monkeypatch.setattr(explore, "_FEW_CHILDREN", 10**9)
    assert found == [ask.question_entities(index, vocab, q) for q in questions]
    assert found[0] == ["Amélie (film)"] and found[1] == ["Tom Hanks"] and "Łódź" in found[2]


def test_a_walk_checks_its_budget_at_every_step_and_stops_there():
    """A clock that moves one second a reading: a budget of N seconds lets a walk take about N
    steps, then it raises WalkTimeout from inside (a server's thread is then free); without a
    budget, or with a larger one, the same walk gives every fact."""
    from refactx_index.tree.explore import Budget, WalkTimeout, entities, facts_page

    path = str(tokenizer_dir("gpt2"))
    facts = [f"<Entity {i}> <relation> <Object {i}> ." for i in range(300)]
    index = MemoryTreeIndex.from_facts(facts, path)
    tok = open_vocabulary("gpt2", path).tokenizer()
    everything = facts_page(index, tok, "", limit=300)
    assert len(everything) == 300

    class Clock:
        def __init__(self) -> None:
            self.now = 0.0

        def __call__(self) -> float:
            self.now += 1.0
            return self.now

    for walk in (lambda budget: facts_page(index, tok, "", offset=0, limit=300, budget=budget),
                 lambda budget: entities(index, tok, "", limit=None, budget=budget)):
        clock = Clock()
        with pytest.raises(WalkTimeout, match="took over 50 s"):
            walk(Budget(50, clock))
        assert clock.now <= 52  # it stopped at the reading that found the budget spent
        assert walk(Budget(10 ** 9, Clock()))  # the same walk, with time enough, ends
    with pytest.raises(WalkTimeout):
        facts_page(index, tok, "", limit=1, budget=Budget(0))  # a spent budget: not one step
