"""Constrained beams (engines/vllm_beams.py) end where the mask and the server's fact reader end a
row: on every end-of-sequence id of the model's one Vocabulary, the generation config's too.

The search is engine-neutral (its engine is a ``score`` function); here the engine is a scripted
one over the real SmolLM2 vocabulary and an index of the shared sample's facts: inside a fact it
prefers the smallest id the matcher allows, outside one it prefers ``Answer`` -- the end id
that the generation config of the served directory adds (tests/runtime/test_server_vllm.py's
model directory, as Llama-3 Instruct's adds ``<|eot_id|>``). The real engine's beams are
tests/runtime/test_engine_vllm.py's and test_server_vllm.py's."""

from __future__ import annotations

import pytest

from .test_server_vllm import two_end_model

PROMPT = "Facts about Germany.\nFact:"


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory):
    from refactx_index.vocab import open_model_vocabulary

    return open_model_vocabulary(two_end_model(tmp_path_factory.mktemp("smollm2-two-ends")))


@pytest.fixture(scope="module")
def index(vocabulary, sample_fact_texts):
    from refactx_index.tree.memory import MemoryTreeIndex

    return MemoryTreeIndex.from_facts(sample_fact_texts, vocabulary.file)


def _scripted(answer: int, other: int):
    def score(requests, top):
        out = []
        for _ids, allowed in requests:
            if allowed is not None:  # inside a fact: the smallest allowed id first
                ranked = sorted(int(t) for t in allowed)
                out.append({t: -0.1 - 3.0 * (k > 0) - 0.01 * k for k, t in enumerate(ranked)})
            else:  # free text: "Answer", then the tokenizer's end, then some text
                choices = {answer: -0.1, 2: -2.0, other: -2.5}
                out.append(dict(list(choices.items())[:top]))
        return out

    return score


def test_a_beam_ends_on_the_generation_config_s_end_id_where_the_server_reads_its_facts(vocabulary, index):
    from refactx_index.engines.core import FactConstraint
    from refactx_index.engines.vllm_beams import constrained_beams
    from refactx_index.qa.ask import read_facts

    answer = vocabulary.tokenizer().token_to_id("Answer")
    other = vocabulary.encode([" The"])[0][0]
    assert vocabulary.eos_ids == (2, answer)
    prompt = vocabulary.encode([PROMPT])[0]
    score = _scripted(answer, other)

    (hyps,) = constrained_beams(score, vocabulary, [prompt], index, beam_width=3, max_tokens=40, length_penalty=1.0)
    best = hyps[0]
    assert best.tokens[-1] == answer and answer not in best.tokens[:-1], best.tokens
    assert all(h.tokens[-1] in vocabulary.eos_ids for h in hyps)  # every hypothesis ended, on an end id
    # the facts the beam reports are the ones the server's reader finds in the same row
    reader = FactConstraint.for_vocabulary({"sample": index}, vocabulary)
    served = read_facts(reader.matchers["sample"].matcher, vocabulary, index, prompt + best.tokens, len(prompt))
    assert best.facts and [tuple(f.token_ids) for f in served] == [tuple(f) for f in best.facts]
    assert all(f.stored and f.complete for f in served)

    # the tokenizer's end alone (what the search took before) does not end the row on "Answer":
    # the beam writes on past the end the mask and the reader see
    (only_tokenizer_end,) = constrained_beams(score, vocabulary, [prompt], index, beam_width=3, max_tokens=40,
                                              length_penalty=1.0, eos_ids=[2])
    assert answer in only_tokenizer_end[0].tokens[:-1]


def test_a_vocabulary_without_an_end_id_is_refused(vocabulary, index):
    from dataclasses import replace

    from refactx_index.engines.vllm_beams import constrained_beams
    from refactx_index.errors import InputRefused

    with pytest.raises(InputRefused, match="no end-of-sequence id"):
        constrained_beams(_scripted(0, 1), replace(vocabulary, eos_ids=()), [[1, 2]], index, beam_width=3,
                          max_tokens=4, length_penalty=1.0)
