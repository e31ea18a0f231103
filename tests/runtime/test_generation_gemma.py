"""The second real model: Gemma 3 270M (the base model, its GGUF joined from the chunk
packages, a 262,144-id vocabulary, no chat template), loaded once for the module. Its prompt
is the plain-text rendering of the same messages; a constrained reply writes only stored
facts of an index built with Gemma's own vocabulary, and ends (after its Answer line, before
the token limit) instead of going on with the next ``Question:``.

The assertions are on facts and on where the reply ends, never on the model's free text."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow]

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

QUESTION = "What is the capital of Germany?"
MAX_NEW_TOKENS = 64


@pytest.fixture(scope="module")
def loaded():
    from refactx_index.errors import ConfigError
    from refactx_index.qa.models import load_model

    try:
        return load_model("gemma3-270m")
    except ConfigError as exc:  # the chunk packages are not installed (./dev setup installs them)
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def index(loaded, sample_fact_texts):
    from refactx_index.tree.memory import MemoryTreeIndex

    return MemoryTreeIndex.from_facts(sample_fact_texts, loaded.vocabulary)


@pytest.fixture(scope="module")
def stored(loaded, sample_fact_texts) -> set[tuple[int, ...]]:
    """Every sample fact in Gemma's vocabulary, encoded independently of the index."""
    from refactx_index.vocab import encode_facts

    encoded = encode_facts(loaded.vocabulary.tokenizer(), sample_fact_texts, ())
    return {tuple(encoded.ids(i)) for i in range(len(sample_fact_texts))}


def test_gemma_is_a_262k_vocabulary_without_a_chat_template(loaded, index):
    assert type(loaded.model).__name__ == "Gemma3ForCausalLM"
    assert loaded.vocabulary.vocab_size == 262_144 and loaded.vocabulary.eos_ids
    assert not getattr(loaded.tokenizer, "chat_template", None)
    assert index.info.vocab_size == loaded.vocabulary.vocab_size
    from refactx_index.prompting.prompt import fitted_prompt

    text = fitted_prompt(index, loaded.tokenizer).render(loaded.tokenizer, QUESTION, "Fact:")
    assert text.startswith("<bos>") and text.endswith(f"Question: {QUESTION}\nReply:\nFact:")
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == loaded.tokenizer.bos_token_id and ids.count(loaded.tokenizer.bos_token_id) == 1
    assert text.count("\nReply:\n") == len(fitted_prompt(index, loaded.tokenizer).examples) + 1


def test_a_constrained_answer_writes_only_stored_facts_and_ends(loaded, index, stored):
    from refactx_index.qa.ask import ask

    answer = ask([QUESTION], index, loaded, num_beams=1, max_new_tokens=MAX_NEW_TOKENS, policies="prefill-fact")[0]
    assert answer.facts, answer.reply  # the reply opens with a fact
    complete = [f.token_ids for f in answer.facts if f.complete]
    assert complete and all(f in stored for f in complete), answer.reply
    assert all(f.stored for f in answer.facts if f.complete)
    # it ended by itself: before the token limit, at its Answer line, not in a next question
    assert answer.generated_tokens < MAX_NEW_TOKENS, answer.reply
    assert "Question:" not in answer.reply and answer.answer, answer.reply
