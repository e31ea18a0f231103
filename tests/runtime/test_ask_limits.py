"""Questions are refused before any generation when they cannot be answered sensibly: an
empty one (the model would invent a question) or one past the configured length (a
20,000-character question took 53 s and 1.4 GB)."""

from __future__ import annotations

import pytest

from refactx_index import InputRefused, MemoryTreeIndex
from refactx_index.qa.ask import DEFAULT_MAX_QUESTION_CHARS, ask



@pytest.fixture(scope="module")
def loaded():
    from refactx_index.qa.models import load_model

    return load_model("smollm2")


@pytest.fixture(scope="module")
def index(loaded):
    return MemoryTreeIndex.from_facts(["<Germany> <capital> <Berlin> ."], loaded.tokenizer)


@pytest.mark.parametrize("questions", [[""], ["   \n\t"], ["Who?", ""], []])
def test_an_empty_question_is_refused(index, loaded, questions):
    with pytest.raises(InputRefused, match="empty|no question"):
        ask(questions, index, loaded, max_new_tokens=1)


def test_an_oversized_question_is_refused_with_its_limit(index, loaded):
    question = "What is the capital of Germany? " * 700  # ~22,000 characters
    with pytest.raises(InputRefused, match=f"at most {DEFAULT_MAX_QUESTION_CHARS:,}"):
        ask([question], index, loaded, max_new_tokens=1)
    with pytest.raises(InputRefused, match="at most 20 "):
        ask(["What is the capital of Germany?"], index, loaded, max_new_tokens=1,
            max_question_chars=20)
    # at the limit: answered
    (answer,) = ask(["Capital of Germany?"], index, loaded, num_beams=1, max_new_tokens=2,
                    max_question_chars=len("Capital of Germany?"))
    assert answer.generated_tokens >= 1
