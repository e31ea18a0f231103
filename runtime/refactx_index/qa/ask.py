"""Answer questions with constrained generation: the model fetches facts, then answers.

``ask(questions, index, loaded)`` builds the chat prompt (``refactx_index.prompting.prompt``),
generates with :class:`~refactx_index.engines.transformers.RefactxLogitsProcessor` (beam search
or greedy; a batch of questions is left-padded into one ``generate`` call), and reads
each reply back: the facts it wrote (each checked against the index, by :func:`read_facts`,
the reader the server shares), the final answer, token counts and timings. Before any
generation, :func:`refactx_index.tree.index.check_vocabulary` makes sure that the model's
vocabulary is the index's.

What a reply may write beyond the fact constraint is decided by the answer policies
(:mod:`refactx_index.qa.policies`), one ``policies=`` list: by default the best measured
(prefill fact, entities first, relations first, grounded) over a fact index; ``()`` is the
plain mode, the constraint alone. Here they are applied to transformers' scores by
:class:`PolicyProcessor`. The question's own entities, which entities first and relations
first follow, are found by :func:`question_entities`: the spans of the question that are
subjects of the index, an exact-match pass over the tree.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

from ..constraint.matcher import FACT, FactMatcher
from ..engines.core import index_prompt, index_trigger
from ..errors import InputRefused
from ..prompting.prompt import Prompt, TRIGGER, final_answer, fitted_prompt
from ..tree.explore import _frontier, entities
from ..tree.index import ServedBuild, TreeIndex
from ..tree.provenance import Provenance
from ..vocab import ENCODED_OK, Vocabulary, VocabularyLike, as_vocabulary, encode_facts
from .models import LoadedModel
from .policies import (BEST_POLICIES, END, PLAIN, PREFER, Allowed, AnswerContext, GroundedRule, PlainEnd, Policy, Rule,
                       needs_entities, parse_policies, policy_list, policy_rules, prefill_of)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


# A question is a sentence or two. Generation's time and memory grow with the prompt (a
# 20,000-character question ran 53 s and took 1.4 GB), so a longer one is refused, not answered
DEFAULT_MAX_QUESTION_CHARS = 2000


def check_questions(questions: Sequence[str], max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> None:
    """Raise :class:`InputRefused` for no question, an empty (or blank) question, or one longer
    than ``max_chars`` characters: an empty one would be answered by a question the model
    invents, an oversized one costs minutes and gigabytes."""
    if not questions:
        raise InputRefused("no question to answer")
    for i, question in enumerate(questions):
        where = f"question {i + 1}" if len(questions) > 1 else "the question"
        if not isinstance(question, str):
            raise InputRefused(f"{where} is not text: {type(question).__name__}")
        if not question.strip():
            raise InputRefused(f"{where} is empty: ask something")
        if len(question) > max_chars:
            raise InputRefused(
                f"{where} has {len(question):,} characters; at most {max_chars:,} are answered "
                "(max_question_chars)"
            )


@dataclass(frozen=True)
class GeneratedFact:
    """A fact the model wrote after the trigger: its text, its ids, and whether the index
    holds exactly that sequence (``complete`` is false when generation stopped inside it).
    ``provenance``: where a stored fact comes from (its fact id, and the statements or
    descriptions it was verbalized from); None for a fact not stored, or when the build has
    no provenance (docs/provenance.md)."""

    text: str
    token_ids: tuple[int, ...]
    stored: bool
    complete: bool = True
    provenance: Provenance | None = None


@dataclass
class Answer:
    """One question's reply, read back."""

    question: str
    reply: str  # the generated text (special tokens removed)
    facts: list[GeneratedFact]
    answer: str  # after the last "Answer:" line; "" when the reply has none
    prompt_tokens: int
    generated_tokens: int
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["facts"] = [{**asdict(f), "token_ids": list(f.token_ids)} for f in self.facts]
        return data


def read_facts(matcher: FactMatcher, vocabulary: VocabularyLike, index: TreeIndex, row: Sequence[int],
               prompt_length: int, *, build: ServedBuild | None = None) -> list[GeneratedFact]:
    """The facts a constrained row wrote, in order, as the matcher let them through, each
    checked against the index's ``build`` (the one the generation read; default: the
    serving one): the one reader of a finished reply's facts (``ask``, ``eval`` and both of
    the server's back ends). A row that stopped inside a fact reports it ``complete: false``."""
    state = matcher.scan(row, prompt_length, build=build)
    written = [(fact, True) for fact in state.done]
    if state.mode == FACT and state.prefix:  # generation stopped inside or at the end of a fact
        written.append((state.prefix, state.ends))
    return _checked(index, as_vocabulary(vocabulary), written, build)


def _checked(index: TreeIndex, vocabulary: Vocabulary, written: list[tuple[tuple[int, ...], bool]],
             build: ServedBuild | None) -> list[GeneratedFact]:
    """``(ids, complete)`` of facts written, as facts checked on ``build``, with provenance."""
    checks = index.next_tokens_batch([f for f, _ in written], build=build) if written else []
    facts = [
        GeneratedFact(text=vocabulary.continuation(f).strip(), token_ids=f, stored=check.ends, complete=complete)
        for (f, complete), check in zip(written, checks)
    ]
    return with_provenance(index, facts, build=build)


def read_reply(processor: Any, tokenizer: "PreTrainedTokenizerBase", index: TreeIndex, row: Sequence[int],
               prompt_length: int, constrained: bool = True, trigger: str = TRIGGER, *,
               build: ServedBuild | None = None, prefill: str = "",
               vocabulary: Vocabulary | None = None) -> tuple[str, list[GeneratedFact]]:
    """The reply text of a generated row and the facts it wrote, in order, each checked
    against the index's ``build`` (the one the generation read; default: the serving one).

    Constrained, the facts are read on token ids by the matcher (``processor.matcher``:
    :func:`read_facts`). Unconstrained, they are the text after each trigger up to the
    line's end, encoded as the tokenize stage encodes facts: what the model would have had
    to write. ``prefill``: the text the prompt ended with as the reply's opening (it starts
    the reply text). ``vocabulary``: the model's (default: ``tokenizer``'s own).
    """
    vocab = vocabulary or as_vocabulary(tokenizer)
    reply = prefill + tokenizer.decode(list(row[prompt_length:]), skip_special_tokens=True)
    if constrained:
        return reply, read_facts(processor.matcher, vocab, index, row, prompt_length, build=build)
    info = index.info
    texts = [m.group(1).strip() for m in re.finditer(re.escape(trigger) + r"(.*)", reply)]
    encoded = encode_facts(vocab.tokenizer(), texts, (), info.fact_prefix, info.fact_suffix)
    written = [(tuple(encoded.ids(i)), True) for i in range(len(texts)) if texts[i]]
    return reply, _checked(index, vocab, written, build)


def with_provenance(index: TreeIndex, facts: list[GeneratedFact], *,
                    build: ServedBuild | None = None) -> list[GeneratedFact]:
    """``facts`` with the provenance of the stored ones, read in one round trip from ``build``
    (the one the facts were checked on; default: the serving one). The text is verbalize's:
    the decoded fact stripped of the tree's whitespace ``fact_prefix``."""
    stored = [i for i, f in enumerate(facts) if f.stored]
    # an index of another kind (not a RowTreeIndex) may offer no provenance at all
    lookup = getattr(index, "provenance", None)
    found = lookup([facts[i].text for i in stored], build=build) if stored and lookup is not None else None
    if not found:
        return facts
    facts = list(facts)
    for i, provenance in zip(stored, found):
        facts[i] = replace(facts[i], provenance=provenance)
    return facts


# words that never make an entity on their own: a span of only these is not looked up
_STOPWORDS = frozenset("""a an the of in on at to for by with from and or is are was were be been what which who whom
whose when where why how did does do that this these those it its as movie movies film films about also
same share shared""".split())


def is_stored(index: TreeIndex, vocabulary: VocabularyLike, text: str, build: ServedBuild | None = None) -> bool:
    """Whether the fact text ``text`` (``<s> <p> <o> .``) is stored, encoded as the tokenize stage does."""
    info = index.info
    encoded = encode_facts(as_vocabulary(vocabulary).tokenizer(), [text], (), info.fact_prefix, info.fact_suffix)
    return bool(index.next_tokens_batch([tuple(encoded.ids(0))], build=build)[0].ends)


# a span names at most this many subjects labelled ``span (description)`` (Georgia the country
# and the state): the model chooses among them
DESCRIBED_SUBJECTS = 5


def question_entities(index: TreeIndex, tokenizer: VocabularyLike, question: str, max_words: int = 10) -> list[str]:
    """The labels the question names that are subjects of ``index``, longest first from left
    to right, not overlapping: the exact text of a span of whole words (``<span> <`` starts a
    stored fact), else the labels that are the span and a description in parentheses (``<span
    (...)> <``, as the labels stage writes an item without a Wikipedia title: "Northern Ireland
    (region in north-west Europe, part of the United Kingdom)"), at most DESCRIBED_SUBJECTS of
    them; spans of stopwords only are not looked up."""

    words = [(m.start(), m.end()) for m in re.finditer(r"[^\s]+", question)]
    prefix = index.info.fact_prefix
    spans = {(i, n): question[words[i][0]:words[i + n - 1][1]].strip(" ?!.,;:'\"")
             for i in range(len(words)) for n in range(1, min(max_words, len(words) - i) + 1)}
    looked_up = [s for s in dict.fromkeys(spans.values()) if s and not all(w.lower() in _STOPWORDS for w in s.split())]
    off_tree = _spans_off_tree(index, as_vocabulary(tokenizer), looked_up)
    undescribed = _spans_off_tree(index, as_vocabulary(tokenizer), looked_up, " (")
    wanted = set(looked_up)
    found: list[str] = []
    i = 0
    while i < len(words):
        taken = 0
        for n in range(min(max_words, len(words) - i), 0, -1):
            span = spans[(i, n)]
            if span not in wanted:
                continue
            if span not in off_tree and next(_frontier(index, tokenizer, f"{prefix}<{span}> <"), None) is not None:
                found.append(span)
            elif span not in undescribed and (described := [
                    label.label for label in entities(index, tokenizer, f"{span} (", limit=DESCRIBED_SUBJECTS)]):
                found += described
            else:
                continue
            taken = n
            break
        i += max(taken, 1)
    return list(dict.fromkeys(found))


def _spans_off_tree(index: TreeIndex, vocabulary: Vocabulary, spans: list[str], after: str = ">") -> set[str]:
    """The spans no stored fact can start with as its subject, found in one batch lookup.

    Where facts are encoded by their pieces (cut before each " <"), a fact whose subject is
    ``span`` starts with exactly the ids of ``fact_prefix <span>``: a span whose ids leave
    the tree is no subject, and the text walk of :func:`_frontier` (which, for a span off
    the tree, decodes every child of the longest prefix it shares with the tree) is spared.
    ``after``: what follows the span, ``>`` (a subject's end) or `` (`` (a described
    subject's description). Elsewhere nothing is ruled out here."""
    if not spans or not vocabulary.encodes_by_pieces:
        return set()
    encoded = encode_facts(vocabulary.tokenizer(), [f"<{span}{after}" for span in spans], (), index.info.fact_prefix,
                           "")
    answers = index.next_tokens_batch([encoded.ids(k) for k in range(len(spans))])
    return {span for k, (span, answer) in enumerate(zip(spans, answers))
            if answer.empty and encoded.status[k] == ENCODED_OK}


class PolicyProcessor:
    """The transformers adapter of the answer policies: a logits processor after the fact
    constraint that decodes each row's reply once a step (``prefill`` and the ids after
    column ``prompt_width``) and applies each rule's :class:`~refactx_index.qa.policies.Allowed`
    to the row's scores, in the rules' order (:mod:`refactx_index.qa.policies`). Rows are
    ``questions x beams``."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", rules: Sequence[Rule], prompt_width: int,
                 num_beams: int = 1, prefill: str = ""):
        self.tokenizer, self.rules, self.width, self.prefill = tokenizer, list(rules), prompt_width, prefill
        self.beams = max(num_beams, 1)

    def reply(self, generated: Sequence[int]) -> str:
        return self.prefill + self.tokenizer.decode(list(generated), skip_special_tokens=True)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        for r in range(input_ids.shape[0]):
            text = self.reply(input_ids[r, self.width:].tolist())
            for rule in self.rules:
                apply_allowed(scores[r], rule.allowed(r // self.beams, text))
        return scores


def apply_allowed(scores: Any, allowed: Allowed | None) -> None:
    """Apply, in place, what a rule allows to one row's next-token ``scores`` (a torch
    tensor): PREFER, ONLY or END (:mod:`refactx_index.qa.policies`); None changes nothing."""
    import torch  # as in the processors that call it: importing this module loads no torch

    if allowed is None or not allowed.ids:
        return
    keep = torch.tensor(allowed.ids, dtype=torch.long, device=scores.device)
    kept = scores[keep]
    finite = bool(torch.isfinite(kept).any())
    if allowed.how == PREFER and not finite:  # a preference never undoes the constraint
        return
    row = torch.full_like(scores, float("-inf"))
    row[keep] = 0.0 if allowed.how == END or not finite else kept
    scores.copy_(row)


class GroundedAnswer(GroundedRule):
    """The grounded answer's rule (:class:`~refactx_index.qa.policies.GroundedRule`) as a
    logits processor of its own, for the server's transformers back end, which grounds some
    rows of a batch and not others (:meth:`mask_row`). Rows are ``questions x beams``."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", prompt_width: int, trigger: str, eos: Sequence[int],
                 stored: Any, prefill: str = "", entities: Sequence[Sequence[str]] | None = None,
                 num_beams: int = 1, words: Sequence[frozenset[str]] | None = None):
        super().__init__(tokenizer, trigger, eos, stored, entities=entities, words=words)
        self.width, self.prefill, self.beams = prompt_width, prefill, max(num_beams, 1)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        for r in range(input_ids.shape[0]):
            entities = self.entities[r // self.beams] if self.entities is not None else None
            words = self.words[r // self.beams] if self.words is not None else None
            self.mask_row(input_ids[r, self.width:].tolist(), scores[r], entities, words)
        return scores

    def mask_row(self, generated: Sequence[int], scores: Any, entities: Sequence[str] | None = None,
                 words: frozenset[str] | None = None) -> None:
        """Mask, in place, the next-token ``scores`` of one row whose reply so far is
        ``generated`` (``entities``, ``words``: :meth:`candidates`)."""
        text = self.prefill + self.tokenizer.decode(list(generated), skip_special_tokens=True)
        apply_allowed(scores, self.allowed_for(text, entities, words))


def default_policies(index: TreeIndex) -> tuple[Policy, ...]:
    """The policies a question is answered with when none are named: the best measured
    (:data:`~refactx_index.qa.policies.BEST_POLICIES`) over a fact index; over a path index
    (``Path:``, no ``<s> <p> <o> .`` facts to read entities, relations or an answer from)
    the plain mode."""
    return PLAIN if index.info.index_kind == "paths" else BEST_POLICIES


def ask(
    questions: Sequence[str],
    index: TreeIndex,
    loaded: LoadedModel,
    *,
    prompt: Prompt | None = None,
    num_beams: int = 3,
    max_new_tokens: int = 128,
    constrained: bool = True,
    max_question_chars: int = DEFAULT_MAX_QUESTION_CHARS,
    trigger: str | None = None,
    policies: Sequence[Policy] | str | None = None,
) -> list[Answer]:
    """Answer ``questions`` in one left-padded batch (see the module doc); ``trigger`` starts
    what the index constrains. By default both follow the index's kind: ``Fact:`` and the
    fact prompt with examples drawn from the index (:func:`refactx_index.prompting.prompt.fitted_prompt`),
    or over a path index (``info.index_kind`` ``paths``) ``Path:`` and ``paths.PATH_PROMPT``.
    ``policies``: the answer policies (:mod:`refactx_index.qa.policies`; a list, or names
    for :func:`~refactx_index.qa.policies.parse_policies`); None: :func:`default_policies`,
    the best measured over a fact index; ``()`` the plain mode. A model without a chat
    template gets :class:`~refactx_index.qa.policies.PlainEnd` as well.

    Raises :class:`InputRefused`, before anything is generated, for an empty question, one
    longer than ``max_question_chars`` (:func:`check_questions`) or an unknown policy."""
    check_questions(questions, max_question_chars)
    if policies is None:
        policies = default_policies(index)
    policies = parse_policies(policies) if isinstance(policies, str) else policy_list(policies)
    import torch
    from transformers import LogitsProcessorList

    from ..engines.transformers import RefactxLogitsProcessor

    tok = loaded.tokenizer
    if not getattr(tok, "chat_template", None):  # a plain-text prompt (a base model): end after the reply
        policies = policy_list([*policies, PlainEnd()])
    if prompt is None:
        if index.info.index_kind == "paths":
            prompt = index_prompt(index)
        else:
            prompt = fitted_prompt(index, tok)
    trigger = trigger or index_trigger(index)
    prefill = prefill_of(policies, trigger)
    texts = [prompt.render(tok, q, prefill) for q in questions]
    side = tok.padding_side
    tok.padding_side = "left"
    try:
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tok.padding_side = side
    eos = loaded.eos_token_ids
    # one build for the whole batch, from the first step to the check of the facts written
    build = index.serving_build()
    processor = RefactxLogitsProcessor(index, loaded.vocabulary, eos_token_id=eos, trigger=trigger, build=build)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    width = enc["input_ids"].shape[1]
    processors: list[Any] = [processor] if constrained else []
    context = AnswerContext(
        tokenizer=tok, index=index, vocabulary=loaded.vocabulary, questions=list(questions), trigger=trigger,
        eos=eos, policies=policies, prefill=prefill,
        entities=([question_entities(index, loaded.vocabulary, q) for q in questions] if needs_entities(policies)
                  else [[] for _ in questions]),
        stored=(lambda text: True) if constrained else (lambda text: is_stored(index, loaded.vocabulary, text, build)))
    rules = policy_rules(context)
    if rules:
        processors.append(PolicyProcessor(tok, rules, width, num_beams, prefill))
    trips_before = index.stats.round_trips if hasattr(index, "stats") else 0
    started = time.perf_counter()
    with torch.inference_mode():
        out = loaded.model.generate(
            **enc,
            logits_processor=LogitsProcessorList(processors),
            num_beams=num_beams,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
        )
    seconds = time.perf_counter() - started
    round_trips = (index.stats.round_trips if hasattr(index, "stats") else 0) - trips_before
    answers = []
    for r, question in enumerate(questions):
        row = out[r].tolist()
        generated = row[width:]
        while generated and generated[-1] == pad:
            generated.pop()
        reply, facts = read_reply(processor, tok, index, row[: width + len(generated)], width,
                                  constrained, trigger, build=build, prefill=prefill, vocabulary=loaded.vocabulary)
        answers.append(Answer(
            question=question,
            reply=reply,
            facts=facts,
            answer=final_answer(reply),
            prompt_tokens=int(enc["attention_mask"][r].sum()),
            generated_tokens=len(generated),
            timings={"generate_s": round(seconds, 3), "processor_s": round(processor.seconds, 3),
                     "ms_per_step": round(1000 * seconds / max(1, out.shape[1] - width), 2),
                     "steps": processor.steps, "round_trips": round_trips},
        ))
    return answers
