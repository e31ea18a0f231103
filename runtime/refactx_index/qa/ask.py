"""Answer questions with constrained generation: the model fetches facts, then answers.

``ask(questions, index, loaded)`` builds the chat prompt (``refactx_index.prompting.prompt``),
generates with :class:`~refactx_index.engines.transformers.RefactxLogitsProcessor` (beam search
or greedy; a batch of questions is left-padded into one ``generate`` call), and reads
each reply back: the facts it wrote (each checked against the index, by :func:`read_facts`,
the reader the server shares), the final answer, token counts and timings. Before any
generation, :func:`refactx_index.tree.index.check_vocabulary` makes sure that the model's
vocabulary is the index's.

Two per-request options, off by default: ``prefill_fact`` opens every reply with the
trigger (the prompt ends with ``Fact:``, so a question is never answered from nothing), and
``entities_first`` finds the question's own entities (:func:`question_entities`: the spans of
the question that are subjects of the index, an exact-match pass over the tree) and, while
a fact's subject is being written and still follows one of them, lets through only the
tokens that continue one of them (:class:`EntitiesFirst`). ``grounded`` makes the text after
``Answer:`` an entity or value of a stored fact the reply wrote (its subject or object), or
``I don't know.``, then the end (:class:`GroundedAnswer`). ``relations_first`` follows the
question's relation words (:class:`RelationsFirst`): while a word of the question that names
a relation of a question entity or of an object written is not yet covered by a written
fact, the reply writes another fact, from that entity, with that relation (a question of two
relations gets a chain of two facts); with ``grounded`` as well, the answer comes only from
facts chained from a question entity, and with ``named_relations_only`` only from those
whose relation covers a word of the question (else ``I don't know.``): precision over recall.
"""

from __future__ import annotations

import bisect
import logging
import re
import time
import weakref
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

from ..constraint.matcher import FACT, FactMatcher
from ..engines.core import index_prompt, index_trigger
from ..errors import InputRefused
from ..prompting.prompt import ANSWER, Prompt, TRIGGER, UNKNOWN, final_answer, fitted_prompt, word_stems
from ..tree.explore import _frontier, objects, relations
from ..tree.index import ServedBuild, TreeIndex
from ..tree.provenance import Provenance
from ..vocab import ENCODED_OK, Vocabulary, VocabularyLike, as_vocabulary, encode_facts
from .models import LoadedModel

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


def question_entities(index: TreeIndex, tokenizer: VocabularyLike, question: str, max_words: int = 10) -> list[str]:
    """The labels the question names that are subjects of ``index`` (the exact text of a span
    of whole words, ``<span> <`` starting a stored fact), longest first from left to right,
    not overlapping; spans of stopwords only are not looked up."""

    words = [(m.start(), m.end()) for m in re.finditer(r"[^\s]+", question)]
    prefix = index.info.fact_prefix
    spans = {(i, n): question[words[i][0]:words[i + n - 1][1]].strip(" ?!.,;:'\"")
             for i in range(len(words)) for n in range(1, min(max_words, len(words) - i) + 1)}
    looked_up = [s for s in dict.fromkeys(spans.values()) if s and not all(w.lower() in _STOPWORDS for w in s.split())]
    off_tree = _spans_off_tree(index, as_vocabulary(tokenizer), looked_up)
    wanted = set(looked_up)
    found: list[str] = []
    i = 0
    while i < len(words):
        taken = 0
        for n in range(min(max_words, len(words) - i), 0, -1):
            span = spans[(i, n)]
            if span not in wanted or span in off_tree:
                continue
            if next(_frontier(index, tokenizer, f"{prefix}<{span}> <"), None) is not None:
                found.append(span)
                taken = n
                break
        i += max(taken, 1)
    return list(dict.fromkeys(found))


def _spans_off_tree(index: TreeIndex, vocabulary: Vocabulary, spans: list[str]) -> set[str]:
    """The spans no stored fact can start with as its subject, found in one batch lookup.

    Where facts are encoded by their pieces (cut before each " <"), a fact whose subject is
    ``span`` starts with exactly the ids of ``fact_prefix <span>``: a span whose ids leave
    the tree is no subject, and the text walk of :func:`_frontier` (which, for a span off
    the tree, decodes every child of the longest prefix it shares with the tree) is spared.
    Elsewhere nothing is ruled out here."""
    if not spans or not vocabulary.encodes_by_pieces:
        return set()
    encoded = encode_facts(vocabulary.tokenizer(), [f"<{span}>" for span in spans], (), index.info.fact_prefix, "")
    answers = index.next_tokens_batch([encoded.ids(k) for k in range(len(spans))])
    return {span for k, (span, answer) in enumerate(zip(spans, answers))
            if answer.empty and encoded.status[k] == ENCODED_OK}


class EntitiesFirst:
    """A logits processor after the fact constraint: in a row whose reply is writing a fact's
    subject (after the last trigger, no ``>`` yet) and still follows one of its question's
    entities or an object of a fact the reply wrote before (so that a chain goes on from the
    first fact's object), only the next token of one of them stays allowed (when the
    constraint leaves one; else nothing changes). Each name is followed in the ids the index
    stores it in (encoded as the tokenize stage encodes facts): a token that only spells a
    prefix of the name (``S`` of ``Sugar``) would lead to another subject of the tree. Rows
    are ``questions x beams``."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", entities: Sequence[Sequence[str]], prompt_width: int,
                 trigger: str,
                 fact_prefix: str, num_beams: int, prefill: str = ""):
        self.tokenizer, self.width, self.trigger, self.beams, self.prefill = (
            tokenizer, prompt_width, trigger, max(num_beams, 1), prefill)
        self.entities = [list(row) for row in entities]
        self.fact_prefix = fact_prefix
        self._paths: dict[str, tuple[tuple[int, ...], list[str]]] = {}

    def path(self, name: str) -> tuple[tuple[int, ...], list[str]]:
        """The ids of ``fact_prefix <name>`` as stored, and the text of each of their prefixes."""
        found = self._paths.get(name)
        if found is None:
            ids = tuple(encode_facts(as_vocabulary(self.tokenizer).tokenizer(), [f"<{name}>"], (), self.fact_prefix,
                                     "").ids(0))
            found = self._paths[name] = (ids, [self.tokenizer.decode(list(ids[:k])) for k in range(len(ids))])
        return found

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for r in range(input_ids.shape[0]):
            entities = self.entities[r // self.beams]
            if not entities:
                continue
            text = self.prefill + self.tokenizer.decode(input_ids[r, self.width:].tolist(), skip_special_tokens=True)
            at = text.rfind(self.trigger)
            if at < 0:
                continue
            written = text[at + len(self.trigger):]
            if ">" in written or "\n" in written:
                continue
            names = entities + _written_objects(text[:at], self.trigger)
            wanted = sorted({ids[k] for ids, texts in map(self.path, names)
                             for k in range(len(ids)) if texts[k] == written})
            _keep_only(scores, r, wanted)
        return scores


class RelationsFirst:
    """A logits processor after the fact constraint that follows the question's relation
    words (:func:`refactx_index.prompting.prompt.word_stems` of the question, less the words
    of its entities of two words or more): a relation label *covers* a word when they share a stem. While a word
    that no written fact's relation covers is covered by a relation of a question entity or
    of an object the reply wrote (``open`` words), and fewer than ``max_facts`` facts are
    written,

    - after a complete fact the reply goes on with another fact (a new line and the trigger,
      not ``Answer:`` or the end): so a question of two relations gets a chain of two facts;
      once a written fact covered a word and none is open, the next line is ``Answer:``
      (a list is not written out to the token limit);
    - at a fact's subject, only those entities whose relations cover an open word are let
      through (the second fact starts from the first's object);
    - at a fact's object, while a word stays open after this fact's relation, only the objects
      (of the subject's first 200) that have a relation covering it, where some have and some
      not: the chain goes on from a film that has a genre.

    At any fact's relation the subject's relations that cover an open word, else those that
    cover any word of the question, are let through first. Where nothing of that applies,
    or the constraint leaves none of the tokens it would keep, nothing changes. Rows are
    ``questions x beams``; ``entities`` per question (:func:`question_entities`)."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", index: TreeIndex, vocabulary: VocabularyLike,
                 questions: Sequence[str], entities: Sequence[Sequence[str]], prompt_width: int, trigger: str,
                 num_beams: int, prefill: str = "", max_facts: int = 4):
        self.tokenizer, self.index, self.vocabulary = tokenizer, index, vocabulary
        self.width, self.trigger, self.beams, self.prefill = prompt_width, trigger, max(num_beams, 1), prefill
        self.fact_prefix = index.info.fact_prefix
        self.entities = [list(e) for e in entities]
        # an entity's own words are no relation words, except for an entity of one word: a tag
        # such as "writer" is an entity, and the question's relation word all the same
        self.words = [word_stems(q) - word_stems(" ".join(n for n in e if len(n.split()) > 1))
                      for q, e in zip(questions, entities)]
        self.max_facts = max_facts
        self.pieces = _token_pieces(tokenizer)
        self._relations: dict[str, list[str]] = {}
        self._objects: dict[str, list[str]] = {}

    def relations_of(self, entity: str) -> list[str]:
        found = self._relations.get(entity)
        if found is None:
            found = self._relations[entity] = [r.label for r in relations(self.index, self.vocabulary, entity,
                                                                          limit=100)]
        return found

    def objects_of(self, entity: str, relation: str) -> list[str]:
        key = f"{entity}\n{relation}"
        found = self._objects.get(key)
        if found is None:
            found = self._objects[key] = [x.label for x in objects(self.index, self.vocabulary, entity, relation,
                                                                    limit=200)]
        return found

    def open_words(self, q: int, facts: Sequence[tuple[str, ...]]) -> tuple[frozenset[str], list[str]]:
        """The question's words no written fact's relation covers, and the entities (question
        entities, then written objects) whose relations cover one of them."""
        covered = frozenset().union(*(word_stems(f[1]) for f in facts))
        words = self.words[q] - covered
        if not words or len(facts) >= self.max_facts:
            return frozenset(), []
        names = list(dict.fromkeys([*self.entities[q], *(f[-2] for f in facts)]))
        return words, [n for n in names if any(word_stems(r) & words for r in self.relations_of(n))]

    def opener(self, q: int, facts: Sequence[tuple[str, ...]]) -> str | None:
        """What the line after the complete ``facts`` opens with: the trigger while a word is
        open, ``Answer:`` once the facts' relations covered a word of the question and none
        is left open (or ``max_facts`` are written), else no preference."""
        if self.open_words(q, facts)[1]:
            return self.trigger
        covered = frozenset().union(*(word_stems(f[1]) for f in facts))
        return ANSWER if covered & self.words[q] or len(facts) >= self.max_facts else None

    def targets(self, q: int, text: str) -> list[str]:
        """The texts the reply ``text`` may go on with (none: no preference)."""
        facts = _written_facts(text, self.trigger)
        start = text.rfind("\n") + 1
        line = text[start:]
        at = text.rfind(self.trigger)
        in_fact = at >= 0 and "\n" not in text[at:]
        if in_fact and line.rstrip().endswith("> ."):  # a complete fact: a new line, a fact or the answer
            opener = self.opener(q, facts)
            return ["\n" + opener] if opener else []
        if not in_fact:  # a new line after a fact: a fact or the answer
            opener = self.opener(q, facts) if text[:start].rstrip().endswith("> .") else None
            return [text[:start] + opener] if opener and opener.startswith(line) else []
        head, written = text[:at + len(self.trigger)], text[at + len(self.trigger):]
        if ">" not in written:  # the subject
            return [f"{head}{self.fact_prefix}<{n}> <" for n in self.open_words(q, facts)[1]]
        o = re.fullmatch(r"\s*<([^>]*)> <([^>]*)> <([^>]*)", written)
        if o:  # the object: one that a relation of an open word goes on from, where some do
            words = self.open_words(q, facts)[0] - word_stems(o.group(2))
            found = self.objects_of(o.group(1), o.group(2)) if words else []
            good = [x for x in found if any(word_stems(r) & words for r in self.relations_of(x))]
            return [f"{head}{written[:o.start(3)]}{x}>" for x in good] if len(good) < len(found) else []
        m = re.fullmatch(r"\s*<([^>]*)> <([^>]*)", written)
        if not m:
            return []
        words = self.open_words(q, facts)[0]
        rels = self.relations_of(m.group(1))
        chosen = [r for r in rels if word_stems(r) & words] or [r for r in rels if word_stems(r) & self.words[q]]
        return [f"{head}{written[:m.start(2)]}{r}>" for r in chosen]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for r in range(input_ids.shape[0]):
            q = r // self.beams
            if not self.words[q]:
                continue
            text = self.prefill + self.tokenizer.decode(input_ids[r, self.width:].tolist(), skip_special_tokens=True)
            targets = self.targets(q, text)
            if targets and targets[0].startswith("\n"):
                wanted = _continuations(self.pieces, targets[0], False)
            else:
                wanted = sorted({t for target in targets if target.startswith(text) and len(target) > len(text)
                                 for t in _continuations(self.pieces, target[len(text):])})
            _keep_only(scores, r, wanted)
        return scores


class GroundedAnswer:
    """A logits processor: once a row's reply opens a line with ``Answer:``, only the tokens
    that continue `` <name>.`` for a subject or object of a stored fact the reply wrote
    before it, or `` I don't know.``, stay allowed, and when one is complete only an end id
    (a per-reply trie of the written facts' names, walked on text). ``stored(text)`` says
    whether a fact text written after the trigger is stored (constrained, every complete
    one is)."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", prompt_width: int, trigger: str, eos: Sequence[int],
                 stored: Any,
                 prefill: str = "", entities: Sequence[Sequence[str]] | None = None, num_beams: int = 1,
                 words: Sequence[frozenset[str]] | None = None):
        self.tokenizer, self.width, self.trigger, self.prefill = tokenizer, prompt_width, trigger, prefill
        self.eos = list(eos)
        self.entities = None if entities is None else [list(e) for e in entities]
        self.words = None if words is None else list(words)
        self.beams = max(num_beams, 1)
        self._stored = stored
        self._known: dict[str, bool] = {}
        self.pieces = _token_pieces(tokenizer)

    def stored(self, text: str) -> bool:
        if text not in self._known:
            self._known[text] = bool(self._stored(text))
        return self._known[text]

    def candidates(self, before: str, entities: Sequence[str] | None = None,
                   words: frozenset[str] | None = None) -> list[str]:
        """The answers the reply text ``before`` its ``Answer:`` allows: the objects of the
        stored facts it wrote that no written fact starts from (a chain's middle step and the
        question's own entity are what was looked up, not what was found), all their objects
        when that leaves none, and "I don't know". With the question's ``entities`` (a
        non-empty list), only the facts of a chain from one of them count: a fact whose
        subject is one of them or an object of such a fact written before it. With the
        question's relation ``words`` (:class:`RelationsFirst`), a fact counts only when its
        relation covers one of them: an answer from a relation the question does not name is
        "I don't know"."""

        facts = [parts for parts in _written_facts(before, self.trigger) if self.stored(parts[-1])]
        if entities:
            reached, chained = set(entities), []
            for f in facts:
                if f[0] in reached:
                    chained.append(f)
                    reached.add(f[-2])
            facts = chained
        if words is not None:
            facts = [f for f in facts if word_stems(f[1]) & words]
        subjects = {f[0] for f in facts}
        objects = list(dict.fromkeys(f[-2] for f in facts))
        names = [o for o in objects if o not in subjects] or objects
        return [f" {n}." for n in names] + [f" {UNKNOWN}"]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        for r in range(input_ids.shape[0]):
            entities = self.entities[r // self.beams] if self.entities is not None else None
            words = self.words[r // self.beams] if self.words is not None else None
            self.mask_row(input_ids[r, self.width:].tolist(), scores[r], entities, words)
        return scores

    def mask_row(self, generated: Sequence[int], scores: Any, entities: Sequence[str] | None = None,
                 words: frozenset[str] | None = None) -> None:
        """Mask, in place, the next-token ``scores`` of one row whose reply so far is
        ``generated`` (``entities``: :meth:`candidates`)."""
        import torch

        text = self.prefill + self.tokenizer.decode(list(generated), skip_special_tokens=True)
        at = text.rfind("\nAnswer:")
        at = at + 1 if at >= 0 else (0 if text.startswith("Answer:") else -1)
        if at < 0:
            return
        written = text[at + len("Answer:"):]
        targets = [c for c in self.candidates(text[:at], entities, words)
                   if c.startswith(written) or written.startswith(c)]
        if any(written.startswith(c) for c in targets):  # an answer is complete: the reply ends
            wanted = self.eos
        else:
            wanted = sorted({t for c in targets for t in _continuations(self.pieces, c[len(written):], False)})
        row = torch.full_like(scores, float("-inf"))
        if wanted:
            keep = torch.tensor(wanted, dtype=torch.long, device=scores.device)
            row[keep] = scores[keep]
            if not torch.isfinite(row[keep]).any():  # masked before: the choice stays open
                row[keep] = 0.0
        else:
            row[self.eos] = 0.0
        scores.copy_(row)


def _written_facts(text: str, trigger: str) -> list[tuple[str, ...]]:
    """The complete facts ``<s> <p> <o> .`` written after a trigger in ``text``, each as its
    parts followed by its whole text."""
    found = []
    for m in re.finditer(re.escape(trigger) + r"[ \t]*(<[^\n]*?> \.)", text):
        whole = m.group(1)
        parts = whole[1:-3].split("> <")
        if len(parts) >= 3:
            found.append((*parts, whole))
    return found


def _written_objects(text: str, trigger: str) -> list[str]:
    """The objects of the complete facts written after a trigger in ``text``, in order."""
    return list(dict.fromkeys(f[-2] for f in _written_facts(text, trigger)))


def _continuations(pieces: "_Pieces", target: str, beyond: bool = True) -> list[int]:
    """Token ids whose text is a prefix of ``target``, or (``beyond``) starts with all of it."""
    ids: list[int] = []
    for k in range(1, len(target) + 1):
        ids += pieces.exact.get(target[:k], ())
    if beyond:
        ids += pieces.starting_with(target)
    return ids


@dataclass
class _Pieces:
    exact: dict[str, list[int]]
    ordered: list[str]  # sorted token texts
    ids: list[int]  # their ids

    def starting_with(self, text: str) -> list[int]:
        lo = bisect.bisect_left(self.ordered, text)
        out = []
        while lo < len(self.ordered) and self.ordered[lo].startswith(text):
            out.append(self.ids[lo])
            lo += 1
        return out


_PIECES: "weakref.WeakKeyDictionary[Any, _Pieces]" = weakref.WeakKeyDictionary()


def _token_pieces(tokenizer: "PreTrainedTokenizerBase") -> _Pieces:
    """Each token's text as decoded alone, indexed (once per tokenizer)."""
    found = _PIECES.get(tokenizer)
    if found is None:
        texts = tokenizer.batch_decode([[t] for t in range(as_vocabulary(tokenizer).vocab_size)])
        exact: dict[str, list[int]] = {}
        for t, text in enumerate(texts):
            if text:
                exact.setdefault(text, []).append(t)
        order = sorted((text, t) for t, text in enumerate(texts) if text)
        found = _PIECES[tokenizer] = _Pieces(exact, [x for x, _ in order], [t for _, t in order])
    return found


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
    prefill_fact: bool = False,
    entities_first: bool = False,
    grounded: bool = False,
    relations_first: bool = False,
    named_relations_only: bool = False,
) -> list[Answer]:
    """Answer ``questions`` in one left-padded batch (see the module doc); ``trigger`` starts
    what the index constrains. By default both follow the index's kind: ``Fact:`` and the
    fact prompt with examples drawn from the index (:func:`refactx_index.prompting.prompt.fitted_prompt`),
    or over a path index (``info.index_kind`` ``paths``) ``Path:`` and ``paths.PATH_PROMPT``.
    ``prefill_fact``, ``entities_first``, ``grounded``, ``relations_first`` and
    ``named_relations_only``: the module doc.

    Raises :class:`InputRefused`, before anything is generated, for an empty question or one
    longer than ``max_question_chars`` (:func:`check_questions`)."""
    check_questions(questions, max_question_chars)
    import torch
    from transformers import LogitsProcessorList

    from ..engines.transformers import EndOfPlainReply, RefactxLogitsProcessor

    tok = loaded.tokenizer
    if prompt is None:
        if index.info.index_kind == "paths":
            prompt = index_prompt(index)
        else:
            prompt = fitted_prompt(index, tok)
    trigger = trigger or index_trigger(index)
    prefill = trigger if prefill_fact else ""
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
    processors = [processor] if constrained else []
    entities = ([question_entities(index, loaded.vocabulary, q) for q in questions]
                if entities_first or relations_first else [])
    if entities_first:
        processors.append(EntitiesFirst(tok, entities, width, trigger, index.info.fact_prefix, num_beams, prefill))
    follow = (RelationsFirst(tok, index, loaded.vocabulary, questions, entities, width, trigger, num_beams, prefill)
              if relations_first else None)
    if follow is not None:
        processors.append(follow)
    if grounded:
        processors.append(GroundedAnswer(tok, width, trigger, eos, lambda text: True if constrained
                                         else is_stored(index, loaded.vocabulary, text, build), prefill,
                                         entities=entities if relations_first else None, num_beams=num_beams,
                                         words=follow.words if follow is not None and named_relations_only
                                         else None))
    if not getattr(tok, "chat_template", None):  # a plain-text prompt (a base model): end after the reply
        processors.append(EndOfPlainReply(tok, width, eos, prefill))
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


def _keep_only(scores, r: int, wanted: list[int]) -> None:
    """Row ``r`` of ``scores`` keeps only the ``wanted`` ids (sorted, distinct), unless none of
    them is allowed there (all -inf): then the row is left as the constraint made it."""
    import torch  # as in the processors that call it: importing this module loads no torch

    if not wanted:
        return
    keep = torch.tensor(wanted, dtype=torch.long, device=scores.device)
    kept = scores[r, keep]
    if not torch.isfinite(kept).any():
        return
    row = torch.full_like(scores[r], float("-inf"))
    row[keep] = kept
    scores[r] = row
