"""The plain-text rendering of a prompt (a model without a chat template) and the end of a
plain-text reply (:class:`EndOfPlainReply`), on SmolLM2's real tokenizer."""

from __future__ import annotations

import pytest

from refactx_index.prompting.prompt import Prompt, render_plain

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from refactx_index.qa.models import model_directory

    return AutoTokenizer.from_pretrained(model_directory("smollm2"))


def test_the_messages_as_a_plain_few_shot_document():
    prompt = Prompt(system="Answer from facts.", examples=(("Q one?", "Fact: <a> <b> <c> .\nAnswer: c."),))
    assert render_plain(prompt.messages("Q two?")) == (
        "Answer from facts.\n\n"
        "Question: Q one?\nReply:\nFact: <a> <b> <c> .\nAnswer: c.\n\n"
        "Question: Q two?\nReply:\n")
    # a conversation without a system message (a server request) renders the same way
    assert render_plain([{"role": "user", "content": " Who? "}]) == "Question: Who?\nReply:\n"


def test_a_tokenizer_without_a_chat_template_gets_the_plain_rendering(tokenizer):
    prompt = Prompt()
    chat = prompt.render(tokenizer, "Who?", "Fact:")
    assert "<|im_start|>" in chat
    template, tokenizer.chat_template = tokenizer.chat_template, None
    try:
        plain = prompt.render(tokenizer, "Who?", "Fact:")
    finally:
        tokenizer.chat_template = template
    assert plain == render_plain(prompt.messages("Who?")) + "Fact:"  # SmolLM2's encoding adds no <bos>


@pytest.mark.parametrize("reply, over", [
    ("I need it.\nFact: <a> <b> <c> .\nAnswer: c.", False),  # the Answer line is still open
    ("I need it.\nFact: <a> <b> <c> .\nAnswer: c.\n", True),
    ("I need it.\n\nQuestion:", True),  # no answer, a next question
    ("The Question: is open", False),  # not at a line start
])
def test_a_plain_reply_ends_after_its_answer_line_or_at_a_next_question(tokenizer, reply, over):
    from refactx_index.engines.transformers import EndOfPlainReply

    eos = [tokenizer.eos_token_id]
    end = EndOfPlainReply(tokenizer, 0, eos)
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    scores = torch.randn(len(tokenizer))
    before = scores.clone()
    end.mask_row(ids, scores)
    if over:
        assert torch.isfinite(scores).nonzero().flatten().tolist() == eos
        assert scores[eos[0]] == before[eos[0]]  # the end id keeps its score
    else:
        assert torch.equal(scores, before)
    # the prefilled trigger counts as the reply's beginning
    assert EndOfPlainReply(tokenizer, 0, eos, prefill="Answer: x.").finished("Answer: x.\n")


def test_the_server_encodes_a_conversation_as_plain_text_without_a_chat_template(tokenizer):
    from refactx_index.server.engine import encode_chat

    messages = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "Who?"}]
    template, tokenizer.chat_template = tokenizer.chat_template, None
    try:
        ids = encode_chat(tokenizer, messages)
    finally:
        tokenizer.chat_template = template
    assert tokenizer.decode(ids) == "Answer.\n\nQuestion: Who?\nReply:\n"
    assert encode_chat(tokenizer, messages) != ids  # with its template: the chat rendering
