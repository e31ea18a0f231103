"""What the fact server asks of a generation back end: a :class:`Job` in, tokens and facts out.

The HTTP layer (:mod:`refactx_index.server.app`) speaks to an :class:`Engine`: transformers in
process (:mod:`refactx_index.server.backend_transformers`) or vLLM's ``AsyncLLM``
(:mod:`refactx_index.server.backend_vllm`). Both read a finished reply's facts with
:func:`refactx_index.qa.ask.read_facts` and take their end ids from the model's one
:class:`~refactx_index.vocab.Vocabulary`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from ..prompting.prompt import plain_prompt
from ..qa.ask import GeneratedFact
from ..tree.index import TreeIndex
from ..vocab import Vocabulary

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_ids = itertools.count(1)


@dataclass
class Job:
    """One request in the engine: its prompt ids, index (None: unconstrained), limits, and
    where its tokens go (``on_token`` runs on the engine's thread)."""

    prompt_ids: list[int]
    index: str | None
    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    deadline: float | None = None  # time.monotonic() after which the row stops ("timeout")
    on_token: Callable[[int], None] | None = None
    on_done: Callable[["Job"], None] | None = None
    id: int = field(default_factory=lambda: next(_ids))
    output_ids: list[int] = field(default_factory=list)
    facts: list[GeneratedFact] = field(default_factory=list)
    finish_reason: str = "stop"  # "length" when max_new_tokens cut it; "cancelled"; "timeout"
    cancelled: bool = False
    error: BaseException | None = None
    build_id: int | None = None
    constraint_seconds: float = 0.0
    # the text after "Answer:" an object of a stored fact the reply wrote, or "I don't know."
    # (ask.GroundedAnswer); needs an index
    grounded: bool = False
    # > 1: constrained beam search of this width, the answer the best beam (an engine with
    # max_beams; needs an index)
    beams: int = 1


class Engine(Protocol):
    """What the HTTP layer needs of an engine:
    :class:`~refactx_index.server.backend_transformers.TransformersEngine` or
    :class:`~refactx_index.server.backend_vllm.VllmEngine`."""

    tokenizer: "PreTrainedTokenizerBase"  # renders chat prompts, decodes replies
    vocabulary: Vocabulary  # the model's: end ids, the facts' encoding (the engine's worker's too)
    indexes: dict[str, TreeIndex]
    context_length: int | None  # the longest prompt + answer; None: unknown
    constraint_seconds: float  # the fact constraint's time seen by this process
    batches: int

    async def run(self, job: Job) -> Job: ...

    def close(self) -> None: ...


def encode_chat(tokenizer: "PreTrainedTokenizerBase", messages: Sequence[dict[str, str]]) -> list[int]:
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    else:  # a base model: the messages as a plain-text few-shot document
        text = plain_prompt(tokenizer, messages)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
