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
