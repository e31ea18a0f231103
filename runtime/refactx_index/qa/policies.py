"""Answer policies: what a reply may write beyond the fact constraint, as values, engine-neutral.

The fact constraint (:mod:`refactx_index.constraint.matcher`) makes every fact a reply writes a
stored one. An answer policy decides more of the reply: where it starts, which stored facts it
writes first, and what its answer may be. A policy is a small frozen value with a name; a list
of them (:func:`policy_list`) is what ``ask``, ``eval`` and the command take, and
:data:`BEST_POLICIES` is the list that answered best (docs/evaluation.md): prefill fact,
entities first, relations first and grounded. An empty list is the plain mode: the constraint
alone.

For one generation, :func:`policy_rules` turns the list into rules over an
:class:`AnswerContext` (the questions, their entities, the index, the token texts). A rule has
one shape, whatever the engine:

- ``reset()``: forget what was cached (a new generation on other questions),
- ``allowed(question, reply) -> Allowed | None``: which token ids the row answering question
  ``question``, whose reply text so far is ``reply`` (the prefill, then the decoded ids), may
  write next (None: no preference).

A rule keeps no state per row: a row's reply text is its whole state, so beam search may
reorder, copy and drop rows freely. An engine adapter (``refactx_index.qa.ask.PolicyProcessor``
for transformers) decodes each row once per step, asks the rules in the list's order, and
applies each :class:`Allowed` to that row's scores after the fact constraint's mask:

- ``PREFER``: only the ids stay, unless the scores left none of them allowed (then nothing
  changes: a preference never undoes the constraint);
- ``ONLY``: only the ids stay, with their scores, or with score 0 where all were masked;
- ``END``: only the ids (the end ids) stay, each with score 0.

No torch here: this module computes ids; the adapters own the scores.
"""

from __future__ import annotations

import bisect
import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Protocol, Sequence

from ..errors import ConfigError, InputRefused
from ..prompting.prompt import ANSWER, UNKNOWN, plain_reply_finished, word_stems
from ..tree.explore import objects, relations
from ..tree.index import TreeIndex
from ..vocab import VocabularyLike, as_vocabulary, encode_facts

PREFER, ONLY, END = "prefer", "only", "end"


class TextDecoder(Protocol):
    """What the rules read of the model's tokenizer: token ids back to text."""

    def decode(self, ids: Sequence[int], **kwargs: Any) -> str: ...

    def batch_decode(self, sequences: Sequence[Sequence[int]], **kwargs: Any) -> list[str]: ...


@dataclass(frozen=True)
class Allowed:
    """The ids a rule lets a row write next (sorted, distinct) and how (module doc)."""

    ids: tuple[int, ...]
    how: str = PREFER


@dataclass
class AnswerContext:
    """What the rules of one generation read.

    ``tokenizer``: the model's tokenizer, for text (``decode(ids)`` and ``batch_decode``);
    ``entities``: per question, the question's own entities (:func:`refactx_index.qa.ask.question_entities`),
    empty lists where no policy of the list needs them; ``stored(text)``: whether a fact text
    written after the trigger is stored (constrained, every complete one is); ``prefill``:
    the text the prompt ends with, the reply's opening."""

    tokenizer: TextDecoder
    index: TreeIndex
    vocabulary: VocabularyLike
    questions: Sequence[str]
    trigger: str
    eos: Sequence[int]
    entities: Sequence[Sequence[str]]
    policies: Sequence["Policy"]
    stored: Callable[[str], bool] = lambda text: True
    prefill: str = ""

    def has(self, kind: type["Policy"]) -> bool:
        return any(isinstance(p, kind) for p in self.policies)


class Rule(Protocol):
    """A policy's rule for one generation (module doc)."""

    def reset(self) -> None: ...

    def allowed(self, question: int, reply: str) -> Allowed | None: ...


@dataclass(frozen=True)
class Policy:
    """An answer policy: a named value; :meth:`rule` makes its rule for one generation."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    needs_entities: ClassVar[bool] = False

    def prefill(self, trigger: str) -> str:
        """The text the prompt ends with (the reply's opening) under this policy."""
        return ""

    def rule(self, context: AnswerContext) -> Rule | None:
        return None


@dataclass(frozen=True)
class PrefillFact(Policy):
    name: ClassVar[str] = "prefill-fact"
    summary: ClassVar[str] = "every reply opens with the trigger ('Fact:'): no question is answered from nothing"

    def prefill(self, trigger: str) -> str:
        return trigger


@dataclass(frozen=True)
class EntitiesFirst(Policy):
    name: ClassVar[str] = "entities-first"
    summary: ClassVar[str] = ("at a fact's subject, only the question's own entities (or an object written "
                              "before) while the reply follows one of them")
    needs_entities: ClassVar[bool] = True

    def rule(self, context: AnswerContext) -> Rule:
        return EntitiesFirstRule(context.tokenizer, context.entities, context.trigger, context.index.info.fact_prefix)


@dataclass(frozen=True)
class RelationsFirst(Policy):
    name: ClassVar[str] = "relations-first"
    summary: ClassVar[str] = ("the relations the question names come first, and the reply chains another fact "
                              "while a named relation is not yet written")
    needs_entities: ClassVar[bool] = True
    max_facts: int = 4

    def rule(self, context: AnswerContext) -> Rule:
        return RelationsFirstRule(context.tokenizer, context.index, context.vocabulary, context.questions,
                                  context.entities, context.trigger, self.max_facts)


@dataclass(frozen=True)
class GroundedAnswer(Policy):
    name: ClassVar[str] = "grounded"
    summary: ClassVar[str] = ("the text after 'Answer:' is an entity of a stored fact the reply wrote, or "
                              "I don't know. (with relations-first: of the chain from a question entity)")

    def rule(self, context: AnswerContext) -> Rule:
        chained = context.has(RelationsFirst)
        named = chained and context.has(NamedRelationsOnly)
        return GroundedRule(context.tokenizer, context.trigger, context.eos, context.stored,
                            entities=context.entities if chained else None,
                            words=relation_words(context.questions, context.entities) if named else None)


@dataclass(frozen=True)
class NamedRelationsOnly(Policy):
    """A narrowing of :class:`GroundedAnswer`, no rule of its own."""

    name: ClassVar[str] = "named-relations-only"
    summary: ClassVar[str] = ("with grounded and relations-first: I don't know unless a chained fact's relation "
                              "is one the question names")


@dataclass(frozen=True)
class PlainEnd(Policy):
    name: ClassVar[str] = "plain-end"
    summary: ClassVar[str] = ("a plain-text reply (a model without a chat template) ends after its Answer: line "
                              "or before a new Question: (added by ask for such a model)")

    def rule(self, context: AnswerContext) -> Rule:
        return PlainEndRule(context.eos)


# the registry, in the order the rules apply (each after those before it)
POLICIES: dict[str, type[Policy]] = {p.name: p for p in (
    PrefillFact, EntitiesFirst, RelationsFirst, GroundedAnswer, NamedRelationsOnly, PlainEnd)}
# the best measured (docs/evaluation.md: MetaQA dev, SmolLM2 and Gemma 3)
BEST_POLICIES: tuple[Policy, ...] = (PrefillFact(), EntitiesFirst(), RelationsFirst(), GroundedAnswer())
# the paper's plain mode: the fact constraint alone
PLAIN: tuple[Policy, ...] = ()
BEST, PLAIN_NAME = "best", "plain"


def policy_list(policies: Iterable[Policy]) -> tuple[Policy, ...]:
    """``policies`` in the registry's order, one of each kind (the first given), checked:
    named-relations-only narrows grounded's answers to relations-first's words, so it needs
    both."""
    order = list(POLICIES.values())
    seen: dict[type, Policy] = {}
    for p in policies:
        if not isinstance(p, Policy) or type(p) not in order:
            raise InputRefused(f"{p!r} is no answer policy: one of {', '.join(POLICIES)}")
        seen.setdefault(type(p), p)
    if NamedRelationsOnly in seen and not (GroundedAnswer in seen and RelationsFirst in seen):
        raise InputRefused("named-relations-only narrows the answers of grounded to the relations of "
                           "relations-first: list both with it")
    return tuple(seen[kind] for kind in order if kind in seen)


def parse_policies(names: str | Sequence[str]) -> tuple[Policy, ...]:
    """The policies named in ``names`` (a comma-separated string or a list of names):
    ``best`` is :data:`BEST_POLICIES`, ``plain`` (alone) none. An unknown name is refused with
    the valid ones."""
    if isinstance(names, str):
        names = names.split(",")
    names = [n.strip() for n in names if n.strip()]
    found: list[Policy] = []
    for name in names:
        if name == BEST:
            found += BEST_POLICIES
        elif name == PLAIN_NAME:
            if len(names) > 1:
                raise InputRefused("'plain' is no policy at all: it cannot be combined with others")
        elif name in POLICIES:
            found.append(POLICIES[name]())
        else:
            raise InputRefused(f"unknown answer policy {name!r}: one of {', '.join(POLICIES)}, "
                               f"or {BEST} ({policy_names(BEST_POLICIES)}) or {PLAIN_NAME} (none)")
    return policy_list(found)


def policy_names(policies: Iterable[Policy]) -> str:
    """The names of ``policies``, comma-separated (``plain`` for none): what
    :func:`parse_policies` reads back."""
    return ",".join(p.name for p in policies) or PLAIN_NAME


def prefill_of(policies: Iterable[Policy], trigger: str) -> str:
    """The reply's opening under ``policies`` (the prompt ends with it)."""
    return "".join(p.prefill(trigger) for p in policies)


def needs_entities(policies: Iterable[Policy]) -> bool:
    return any(p.needs_entities for p in policies)


def policy_rules(context: AnswerContext) -> list[Rule]:
    """The rules of ``context.policies`` for one generation, in the order they apply."""
    return [r for r in (p.rule(context) for p in policy_list(context.policies)) if r is not None]


# ---------------------------------------------------------------- the rules


class EntitiesFirstRule:
    """While a row's reply is writing a fact's subject (after the last trigger, no ``>`` yet)
    and still follows one of its question's entities or an object of a fact the reply wrote
    before (so that a chain goes on from the first fact's object), only the next token of one
    of them (PREFER). Each name is followed in the ids the index stores it in (encoded as the
    tokenize stage encodes facts): a token that only spells a prefix of the name (``S`` of
    ``Sugar``) would lead to another subject of the tree. A question without entities has
    no preference."""

    def __init__(self, tokenizer: TextDecoder, entities: Sequence[Sequence[str]], trigger: str, fact_prefix: str):
        self.tokenizer, self.trigger, self.fact_prefix = tokenizer, trigger, fact_prefix
        self.entities = [list(row) for row in entities]
        self._paths: dict[str, tuple[tuple[int, ...], list[str]]] = {}

    def reset(self) -> None:
        self._paths.clear()

    def path(self, name: str) -> tuple[tuple[int, ...], list[str]]:
        """The ids of ``fact_prefix <name>`` as stored, and the text of each of their prefixes."""
        found = self._paths.get(name)
        if found is None:
            ids = tuple(encode_facts(as_vocabulary(self.tokenizer).tokenizer(), [f"<{name}>"], (), self.fact_prefix,
                                     "").ids(0))
            found = self._paths[name] = (ids, [self.tokenizer.decode(list(ids[:k])) for k in range(len(ids))])
        return found

    def allowed(self, question: int, reply: str) -> Allowed | None:
        entities = self.entities[question] if question < len(self.entities) else []
        if not entities:
            return None
        at = reply.rfind(self.trigger)
        if at < 0:
            return None
        written = reply[at + len(self.trigger):]
        if ">" in written or "\n" in written:
            return None
        names = entities + written_objects(reply[:at], self.trigger)
        return Allowed(tuple(sorted({ids[k] for ids, texts in map(self.path, names)
                                     for k in range(len(ids)) if texts[k] == written})))


def relation_words(questions: Sequence[str], entities: Sequence[Sequence[str]]) -> list[frozenset[str]]:
    """Each question's relation words: :func:`word_stems` of the question less the words of
    its entities of two words or more (an entity of one word, a tag such as "writer", is an
    entity and the question's relation word all the same)."""
    return [word_stems(q) - word_stems(" ".join(n for n in e if len(n.split()) > 1))
            for q, e in zip(questions, entities)]


class RelationsFirstRule:
    """Follows the question's relation words (:func:`relation_words`): a relation label
    *covers* a word when they share a stem. While a word that no written fact's relation
    covers is covered by a relation of a question entity or of an object the reply wrote
    (``open`` words), and fewer than ``max_facts`` facts are written,

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
    there is no preference; all are PREFER."""

    def __init__(self, tokenizer: TextDecoder, index: TreeIndex, vocabulary: VocabularyLike, questions: Sequence[str],
                 entities: Sequence[Sequence[str]], trigger: str, max_facts: int = 4):
        self.tokenizer, self.index, self.vocabulary, self.trigger = tokenizer, index, vocabulary, trigger
        self.fact_prefix = index.info.fact_prefix
        self.entities = [list(e) for e in entities]
        self.words = relation_words(questions, entities)
        self.max_facts = max_facts
        self.pieces = token_pieces(tokenizer)
        self._relations: dict[str, list[str]] = {}
        self._objects: dict[str, list[str]] = {}

    def reset(self) -> None:
        self._relations.clear()
        self._objects.clear()

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
        facts = written_facts(text, self.trigger)
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

    def allowed(self, question: int, reply: str) -> Allowed | None:
        if not self.words[question]:
            return None
        targets = self.targets(question, reply)
        if targets and targets[0].startswith("\n"):
            wanted = continuations(self.pieces, targets[0], False)
        else:
            # a line's opener is written up to its end and no further (a token such as "://"
            # after "Answer" would write past it: no answer line, no trigger); a fact's part
            # may be passed by a token, the fact constraint checks what follows
            wanted = sorted({t for target in targets if target.startswith(reply) and len(target) > len(reply)
                             for t in continuations(self.pieces, target[len(reply):],
                                                    not target.endswith((self.trigger, ANSWER)))})
        return Allowed(tuple(wanted))


class GroundedRule:
    """Once a reply opens a line with ``Answer:``, only the tokens that continue `` <name>.``
    for a name of :meth:`candidates`, or `` I don't know.``, stay allowed (ONLY), and when one
    is complete only an end id (ONLY; END where nothing continues). ``stored(text)``: whether
    a fact text written after the trigger is stored. ``entities`` (per question): only the
    chain from a question entity counts; ``words`` (per question, :func:`relation_words`):
    only facts whose relation covers a word of the question."""

    def __init__(self, tokenizer: TextDecoder, trigger: str, eos: Sequence[int], stored: Callable[[str], bool],
                 entities: Sequence[Sequence[str]] | None = None, words: Sequence[frozenset[str]] | None = None):
        self.tokenizer, self.trigger = tokenizer, trigger
        self.eos = list(eos)
        self.entities = None if entities is None else [list(e) for e in entities]
        self.words = None if words is None else list(words)
        self._stored = stored
        self._known: dict[str, bool] = {}
        self.pieces = token_pieces(tokenizer)

    def reset(self) -> None:
        self._known.clear()

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
        question's relation ``words``, a fact counts only when its relation covers one of
        them: an answer from a relation the question does not name is "I don't know"."""
        facts = [parts for parts in written_facts(before, self.trigger) if self.stored(parts[-1])]
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
        names = list(dict.fromkeys(f[-2] for f in facts))
        names = [o for o in names if o not in subjects] or names
        return [f" {n}." for n in names] + [f" {UNKNOWN}"]

    def allowed(self, question: int, reply: str) -> Allowed | None:
        entities = self.entities[question] if self.entities is not None else None
        words = self.words[question] if self.words is not None else None
        return self.allowed_for(reply, entities, words)

    def allowed_for(self, reply: str, entities: Sequence[str] | None = None,
                    words: frozenset[str] | None = None) -> Allowed | None:
        """:meth:`allowed` with the question's ``entities`` and ``words`` given."""
        at = reply.rfind("\n" + ANSWER)
        at = at + 1 if at >= 0 else (0 if reply.startswith(ANSWER) else -1)
        if at < 0:
            return None
        written = reply[at + len(ANSWER):]
        targets = [c for c in self.candidates(reply[:at], entities, words)
                   if c.startswith(written) or written.startswith(c)]
        if any(written.startswith(c) for c in targets):  # an answer is complete: the reply ends
            return Allowed(tuple(sorted(set(self.eos))), ONLY)
        wanted = sorted({t for c in targets for t in continuations(self.pieces, c[len(written):], False)})
        return Allowed(tuple(wanted), ONLY) if wanted else Allowed(tuple(sorted(set(self.eos))), END)


class PlainEndRule:
    """A reply to a plain-text prompt (a model without a chat template, which has no end of
    turn to write and goes on with the next example's ``Question:`` block): once it holds a
    finished ``Answer:`` line or a line that opens with ``Question:``, only the end ids
    (ONLY), in greedy and beam search alike."""

    def __init__(self, eos: Sequence[int]):
        self.eos = tuple(sorted(set(eos)))
        if not self.eos:
            raise ConfigError("ending a plain-text reply needs at least one end-of-sequence id")

    def reset(self) -> None:
        pass

    def allowed(self, question: int, reply: str) -> Allowed | None:
        return Allowed(self.eos, ONLY) if plain_reply_finished(reply) else None


# ---------------------------------------------------------------- reading a reply's text


def written_facts(text: str, trigger: str) -> list[tuple[str, ...]]:
    """The complete facts ``<s> <p> <o> .`` written after a trigger in ``text``, each as its
    parts followed by its whole text."""
    found = []
    for m in re.finditer(re.escape(trigger) + r"[ \t]*(<[^\n]*?> \.)", text):
        whole = m.group(1)
        parts = whole[1:-3].split("> <")
        if len(parts) >= 3:
            found.append((*parts, whole))
    return found


def written_objects(text: str, trigger: str) -> list[str]:
    """The objects of the complete facts written after a trigger in ``text``, in order."""
    return list(dict.fromkeys(f[-2] for f in written_facts(text, trigger)))


@dataclass
class TokenPieces:
    """Each token's text as decoded alone: exactly, and sorted (for the tokens that start
    with a text)."""

    exact: dict[str, list[int]]
    ordered: list[str] = field(repr=False)  # sorted token texts
    ids: list[int] = field(repr=False)  # their ids

    def starting_with(self, text: str) -> list[int]:
        lo = bisect.bisect_left(self.ordered, text)
        out = []
        while lo < len(self.ordered) and self.ordered[lo].startswith(text):
            out.append(self.ids[lo])
            lo += 1
        return out


def continuations(pieces: TokenPieces, target: str, beyond: bool = True) -> list[int]:
    """Token ids whose text is a prefix of ``target``, or (``beyond``) starts with all of it."""
    ids: list[int] = []
    for k in range(1, len(target) + 1):
        ids += pieces.exact.get(target[:k], ())
    if beyond:
        ids += pieces.starting_with(target)
    return ids


_PIECES: "weakref.WeakKeyDictionary[Any, TokenPieces]" = weakref.WeakKeyDictionary()


def token_pieces(tokenizer: TextDecoder) -> TokenPieces:
    """Each token's text as ``tokenizer.batch_decode`` decodes it alone, indexed (once per tokenizer)."""
    found = _PIECES.get(tokenizer)
    if found is None:
        texts = tokenizer.batch_decode([[t] for t in range(as_vocabulary(tokenizer).vocab_size)])
        exact: dict[str, list[int]] = {}
        for t, text in enumerate(texts):
            if text:
                exact.setdefault(text, []).append(t)
        order = sorted((text, t) for t, text in enumerate(texts) if text)
        found = _PIECES[tokenizer] = TokenPieces(exact, [x for x, _ in order], [t for _, t in order])
    return found
