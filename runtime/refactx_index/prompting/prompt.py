"""The question-answering prompt: reason, fetch facts with ``Fact:``, answer only from them.

Written for this project in the manner of the ReFactX paper: a system message that
explains the ``Fact:`` command, then two short worked examples as earlier chat turns,
then the question. The examples write ``Fact:`` lines themselves; the logits processor
treats the prompt as context, so they neither constrain generation nor count as facts
the model has already written.

A prompt file (``--prompt-file``) replaces the system message and the examples. It is
plain text: the system message, then each example as a ``Q:`` line and an ``A:`` block
(the ``A:`` block runs to the next ``Q:`` or the end of the file)::

    You answer questions ...
    Q: When was Danny Boyle born?
    A: I need his date of birth.
    Fact: <Danny Boyle> <date of birth> <1956-10-20> .
    Answer: 20 October 1956.

Without a prompt file the examples are drawn from the index itself (:func:`fitted_prompt`):
its own facts and relation labels, one example per kind of question, so that the model sees
how this graph names things. A model without a chat template reads the same prompt as plain
text (:meth:`Prompt.render`).
"""

from __future__ import annotations

import logging
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import ConfigError
from ..tree.explore import objects, relations
from ..vocab import VocabularyLike, as_vocabulary, decode_continuation

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


log = logging.getLogger(__name__)

TRIGGER = "Fact:"
ANSWER = "Answer:"
UNKNOWN = "I don't know."

SYSTEM = (
    "You answer questions from a knowledge base of facts. "
    "To read a fact, write a line that starts with Fact: followed by the fact as "
    "<subject> <property> <value> . and the knowledge base completes it with a fact it holds. "
    "Names may carry a short description in parentheses. "
    "First say in one sentence what you need, then write the Fact: lines you need, one per line. "
    "Then write a line that starts with Answer: and answer in a few words, using only the facts "
    f"you wrote. If they do not give the answer, write Answer: {UNKNOWN}"
)

EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "When was Danny Boyle born?",
        "I need the date of birth of Danny Boyle.\n"
        "Fact: <Danny Boyle (British film director)> <date of birth> <1956-10-20> .\n"
        "Answer: 20 October 1956.",
    ),
    (
        "In which country is the Eiffel Tower?",
        "I need the country of the Eiffel Tower.\n"
        "Fact: <Eiffel Tower> <country> <France> .\n"
        "Answer: France.",
    ),
)


@dataclass(frozen=True)
class Prompt:
    """A system message and worked examples (question, answer) shown before a question."""

    system: str = SYSTEM
    examples: tuple[tuple[str, str], ...] = EXAMPLES

    def messages(self, question: str) -> list[dict[str, str]]:
        """Chat messages for ``question``: system, the examples as turns, the question."""
        messages = [{"role": "system", "content": self.system}]
        for q, a in self.examples:
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": question})
        return messages

    def render(self, tokenizer: "PreTrainedTokenizerBase", question: str, prefill: str = "") -> str:
        """The model's input text for ``question``: the chat template's rendering of
        :meth:`messages` with the assistant's turn opened, or for a tokenizer without a
        chat template (a base model) the same system message and examples as plain text,
        ``Question:`` / ``Reply:`` blocks; ``prefill`` opens the reply."""
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(self.messages(question), tokenize=False, add_generation_prompt=True)
        else:
            text = plain_prompt(tokenizer, self.messages(question))
        return text + prefill

    @classmethod
    def from_file(cls, path: str | Path) -> "Prompt":
        """Read a prompt file (format in the module doc)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"prompt file {path}: {exc.strerror or exc}") from exc
        parts = re.split(r"^Q:[ \t]*", text, flags=re.MULTILINE)
        system = parts[0].strip()
        if not system:
            raise ConfigError(f"prompt file {path}: the system message (before the first Q:) is empty")
        examples = []
        for n, block in enumerate(parts[1:], 1):
            question, sep, answer = block.partition("\nA:")
            if not sep or not question.strip() or not answer.strip():
                raise ConfigError(f"prompt file {path}: example {n} needs a 'Q:' line and an 'A:' block")
            examples.append((question.strip(), answer.strip()))
        return cls(system=system, examples=tuple(examples))


PLAIN_QUESTION = "Question:"
PLAIN_REPLY = "Reply:"


def render_plain(messages: Sequence[dict[str, str]]) -> str:
    """Chat ``messages`` as plain text, for a model whose tokenizer has no chat template (a
    base model, such as Gemma 3 270M): the system message, then each user turn as a
    ``Question:`` line and each assistant turn as a ``Reply:`` block, blocks apart by a blank
    line, ending with an open ``Reply:`` after the last question -- a few-shot document the
    model continues. A base model goes on past its reply with the next ``Question:`` block:
    ``refactx_index.engines.transformers.EndOfPlainReply`` ends the row there."""
    blocks = []
    for message in messages:
        role, content = message.get("role"), str(message.get("content") or "").strip()
        if role == "system":
            blocks.append(content)
        elif role == "assistant":
            blocks[-1:] = [f"{blocks[-1]}\n{PLAIN_REPLY}\n{content}" if blocks else f"{PLAIN_REPLY}\n{content}"]
        else:
            blocks.append(f"{PLAIN_QUESTION} {content}")
    return "\n\n".join(blocks) + f"\n{PLAIN_REPLY}\n"


_PLAIN_END = re.compile(rf"(?:^|\n)[ \t]*(?:{re.escape(ANSWER)}[^\n]*\n|{re.escape(PLAIN_QUESTION)})")


def plain_reply_finished(text: str) -> bool:
    """Whether a plain-text reply (:func:`render_plain`) is over: it holds a finished
    ``Answer:`` line (a newline after it) or a line that opens the next ``Question:``."""
    return _PLAIN_END.search(text) is not None


def plain_prompt(tokenizer: "PreTrainedTokenizerBase", messages: Sequence[dict[str, str]]) -> str:
    """:func:`render_plain` for ``tokenizer``, opened by its beginning-of-sequence token where
    its own encoding starts with one (Gemma's ``<bos>``, which a chat template would write):
    prompts are encoded without special tokens."""
    bos = getattr(tokenizer, "bos_token", None)
    starts = bos is not None and tokenizer("", add_special_tokens=True)["input_ids"][:1] == [tokenizer.bos_token_id]
    return (bos if starts else "") + render_plain(messages)


def final_answer(text: str) -> str:
    """The text after the last ``Answer:`` line of a generated reply (``""`` when none)."""
    found = [m.group(1).strip() for m in re.finditer(r"^\s*Answer:(.*)$", text, flags=re.MULTILINE)]
    return found[-1] if found else ""


# ---------------------------------------------------------------- examples from the index

def _parts(text: str) -> tuple[str, str, str] | None:
    body = text.strip().removesuffix(".").rstrip()
    if not (body.startswith("<") and body.endswith(">")):
        return None
    parts = body[1:-1].split("> <")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def _fact(s: str, r: str, o: str) -> str:
    return f"Fact: <{s}> <{r}> <{o}> ."


def branch_facts(index: Any, count: int = 16) -> list[tuple[int, ...]]:
    """Up to ``count`` stored facts of different beginnings: below the first node where the
    tree branches (every fact shares the fact prefix and the ``<``), its most populous
    children, each followed down its most populous branch to the first fact end."""
    cursor, path = index.root(), []
    step = cursor.next_tokens()
    while step.tokens.size == 1 and not step.ends:
        tok = int(step.tokens[0])
        cursor, path = index.advance(cursor, tok), path + [tok]
        step = cursor.next_tokens()
    facts = []
    for tok in step.tokens[step.leaves.argsort()[::-1][:count]].tolist():
        node, ids = index.advance(cursor, tok), path + [tok]
        while node is not None:
            below = node.next_tokens()
            if below.ends or below.tokens.size == 0:
                facts.append(tuple(ids))
                break
            nxt = int(below.tokens[int(below.leaves.argmax())])
            node, ids = index.advance(node, nxt), ids + [nxt]
    return facts


def index_examples(index: Any, tokenizer: "VocabularyLike", unknown: bool = False) -> tuple[tuple[str, str], ...]:
    """Worked examples from ``index``'s own facts (``<s> <r> <o> .``), one per kind of
    question, each where the index has what it needs: a single fact (a relation with one
    object); a chain of two facts, the second starting from the first's object (one to three
    objects, all written); a yes/no answered from a fact; a list (a relation with two or three
    objects, all written); and, only with ``unknown``, an "I don't know" (a relation the subject
    has no fact of: the fact written does not answer; SmolLM2-135M shown it answered "I don't
    know" after the very fact that held the answer, on MetaQA dev: docs/evaluation.md). The
    single fact comes last, the "I don't know" first. Each example is about another
    subject where the index has enough of them (a model shown one subject again and again
    copies it), taken from the tree's most populous branches, so the choice is fixed per index."""

    fast = as_vocabulary(tokenizer).tokenizer()
    strip = len(index.info.fact_prefix)
    seeds = [p for f in branch_facts(index, 16) if (p := _parts(decode_continuation(fast, f)[strip:]))]
    subjects = list(dict.fromkeys(p[0] for p in seeds))
    if not subjects:
        return ()
    values = _relation_values(index, tokenizer)

    used: list[str] = []

    def pick(test):
        """The first subject not used yet (else any) for which ``test(subject)`` gives something."""
        for subject in [x for x in subjects if x not in used] + used:
            found = test(subject)
            if found:
                used.append(subject)
                return subject, found
        return None, None

    def single(subject):
        return next(((rel, found[0]) for rel, found in values(subject).items() if len(found) == 1), None)

    def chain(subject):
        for r1, found1 in values(subject).items():
            for o1 in found1[:2]:
                for second in relations(index, tokenizer, o1, limit=10):
                    found = [x.label for x in objects(index, tokenizer, o1, second.label, limit=5) if x.label != subject]
                    if 1 <= len(found) <= 3:
                        return r1, o1, second.label, found
        return None

    def listed(subject):
        return next(((rel, found) for rel, found in values(subject).items() if 2 <= len(found) <= 3), None)

    def missing(subject):
        own = values(subject)
        other = next((r for _, r, _ in seeds if r not in own), None)
        fact = next(((rel, found[0]) for rel, found in own.items() if found), None)
        return (other, *fact) if other and fact else None

    examples: list[tuple[str, str]] = []
    s, found = pick(single)
    if s:
        r, o = found
        examples.append((f"What is {s} {r}?", f"I need the {r} of {s}.\n{_fact(s, r, o)}\nAnswer: {o}."))
    first_single = len(examples)
    s, found = pick(chain)
    if s:
        r1, o1, r2, ends = found
        facts = "\n".join(_fact(o1, r2, x) for x in ends)
        examples.append((f"What is the {r2} of what {s} is {r1}?",
                         f"I need the {r1} of {s}, then its {r2}.\n{_fact(s, r1, o1)}\n{facts}\n"
                         f"Answer: {', '.join(ends)}."))
    s, found = pick(single)
    if s:
        r, o = found
        examples.append((f"Is {s} {r} {o}?", f"I need the {r} of {s}.\n{_fact(s, r, o)}\nAnswer: yes."))
    s, found = pick(listed)
    if s:
        r, objs = found
        facts = "\n".join(_fact(s, r, x) for x in objs)
        examples.append((f"What are all {s} {r}?", f"I need every {r} of {s}.\n{facts}\nAnswer: {', '.join(objs)}."))
    s, found = pick(missing) if unknown else (None, None)
    if s:
        other, r, o = found
        examples.append((f"What is {s} {other}?", f"I need the {other} of {s}.\n{_fact(s, r, o)}\nAnswer: {UNKNOWN}"))
    # a small model copies the example it read last: the single fact answered closes the list,
    # the "I don't know" opens it
    return tuple(examples[first_single:][::-1] + examples[:first_single])


_FITTED: "weakref.WeakKeyDictionary[Any, Prompt]" = weakref.WeakKeyDictionary()


def fitted_prompt(index: Any, tokenizer: "VocabularyLike") -> Prompt:
    """The system message with :func:`index_examples` (made once per index); the built-in
    examples when the index's facts have no ``<s> <r> <o> .`` shape."""
    try:
        found = _FITTED.get(index)
    except TypeError:  # an index that takes no weak reference: made each time
        found = None
    if found is None:
        examples = index_examples(index, tokenizer)
        if not examples:
            log.info("index %r: no <s> <r> <o> facts to draw examples from; the built-in examples are used",
                     getattr(index.info, "name", "?"))
        found = Prompt(examples=examples) if examples else Prompt()
        try:
            _FITTED[index] = found
        except TypeError:
            pass
    return found


# ---------------------------------------------------------------- examples chosen per question

# words a relation label or a question shares without naming a relation
_PLAIN_WORDS = frozenset("a an the of in on at to for by with from and or is are was were be been what which who "
                         "whom whose when where how did does do that this these those it its as".split())


# English verbs whose past forms share no first four letters with their other forms
_IRREGULAR = {"wrote": "write", "written": "write", "spoke": "speak", "spoken": "speak", "sang": "sing",
              "sung": "sing", "made": "make", "gave": "give", "given": "give", "took": "take", "taken": "take",
              "won": "win", "born": "birth", "died": "death", "bore": "birth"}


def word_stems(text: str, size: int = 4) -> frozenset[str]:
    """The first ``size`` letters of each word of ``text`` (two letters or more) that is not a
    function word, case folded (an irregular past form read as its verb's: ``wrote`` as ``write``): a crude stem
    under which ``directed``, ``director`` and ``directors`` meet."""
    return frozenset(_IRREGULAR.get(w, w)[:size] for w in re.findall(r"[^\W\d_]+", text.casefold())
                     if w not in _PLAIN_WORDS and len(w) > 1)


def _plain(label: str) -> bool:
    """Whether a label reads as a name (a letter or digit first, a letter in it): the
    examples leave out subjects such as ``...All the Marbles`` or ``(Untitled)``."""
    return bool(label[:1].isalnum() and re.search(r"[^\W\d_]", label))


@dataclass(frozen=True)
class PooledExample:
    """A worked example and the relation labels its facts use."""

    question: str
    answer: str
    relations: tuple[str, ...]


def example_pool(index: Any, tokenizer: "VocabularyLike", max_entities: int = 40) -> tuple[PooledExample, ...]:
    """Worked examples from ``index``'s own facts for :class:`QuestionPrompt`: for each
    relation label met, a single fact (the first subject of the walk with one object of it)
    and a list (two or three objects), and for each pair of relation labels met one after
    the other a chain of two facts, the second starting from the first's object (one to
    three end objects, all written). The walk starts at the subjects of the tree's most
    populous branches and goes on to their objects, ``max_entities`` entities at most."""
    fast = as_vocabulary(tokenizer).tokenizer()
    strip = len(index.info.fact_prefix)
    queue = list(dict.fromkeys(p[0] for f in branch_facts(index, 16)
                               if (p := _parts(decode_continuation(fast, f)[strip:])) and _plain(p[0])))
    seen: set[str] = set(queue)
    values = _relation_values(index, tokenizer)

    singles: dict[str, PooledExample] = {}
    lists: dict[str, PooledExample] = {}
    chains: dict[tuple[str, str], PooledExample] = {}
    walked = 0
    while queue and walked < max_entities:
        s = queue.pop(0)
        walked += 1
        for r1, found1 in values(s).items():
            if len(found1) == 1 and r1 not in singles:
                o = found1[0]
                singles[r1] = PooledExample(f"What is {s} {r1}?", f"I need the {r1} of {s}.\n{_fact(s, r1, o)}\n"
                                            f"Answer: {o}.", (r1,))
            if 2 <= len(found1) <= 3 and r1 not in lists:
                facts = "\n".join(_fact(s, r1, x) for x in found1)
                lists[r1] = PooledExample(f"What are all {s} {r1}?", f"I need every {r1} of {s}.\n{facts}\n"
                                          f"Answer: {', '.join(found1)}.", (r1,))
            for o1 in found1[:2]:
                if o1 not in seen and _plain(o1):
                    seen.add(o1)
                    queue.append(o1)
                for r2, found2 in values(o1).items():
                    ends = [x for x in found2 if x != s][:3]
                    if (r1, r2) in chains or not ends or len(found2) > 3:
                        continue
                    facts = "\n".join(_fact(o1, r2, x) for x in ends)
                    chains[(r1, r2)] = PooledExample(
                        f"What is the {r2} of what {s} {r1}?",
                        f"I need the {r1} of {s}, then its {r2}.\n{_fact(s, r1, o1)}\n{facts}\n"
                        f"Answer: {', '.join(ends)}.", (r1, r2))
    return (*singles.values(), *lists.values(), *chains.values())


@dataclass(frozen=True)
class QuestionPrompt:
    """A prompt whose worked examples are chosen per question from a pool
    (:func:`example_pool`): each example scores one for each of its relation labels whose
    words (:func:`word_stems`) the question has, less a half for each it has not; the
    ``count`` best are shown, the best last (a small model copies the example it read
    last). A question that names no relation gets the ``fallback`` examples."""

    system: str = SYSTEM
    pool: tuple[PooledExample, ...] = ()
    fallback: tuple[tuple[str, str], ...] = EXAMPLES
    count: int = 4

    @property
    def examples(self) -> tuple[tuple[str, str], ...]:
        return self.fallback

    def scored(self, question: str) -> list[tuple[float, int, int, PooledExample]]:
        """(score, fewer relations, earlier in the pool, example) for each pooled example."""
        words = word_stems(question)
        out = []
        for i, e in enumerate(self.pool):
            stems = frozenset().union(*(word_stems(r) for r in e.relations))
            out.append((len(stems & words) - 0.5 * len(stems - words), -len(e.relations), -i, e))
        return out

    def for_question(self, question: str) -> Prompt:
        """The :class:`Prompt` for ``question``: the examples it scores best on, the best last."""
        ranked = sorted((x for x in self.scored(question) if x[0] > 0), key=lambda x: x[:3], reverse=True)
        if not ranked:
            return Prompt(system=self.system, examples=self.fallback)
        chosen = [(e.question, e.answer) for *_, e in ranked[:self.count]]
        rest = [e for e in self.fallback if e not in chosen][:max(0, self.count - len(chosen))]
        return Prompt(system=self.system, examples=tuple(rest + chosen[::-1]))

    def render(self, tokenizer: "PreTrainedTokenizerBase", question: str, prefill: str = "") -> str:
        return self.for_question(question).render(tokenizer, question, prefill)


def question_prompt(index: Any, tokenizer: "VocabularyLike", count: int = 4) -> QuestionPrompt:
    """A :class:`QuestionPrompt` over ``index``'s :func:`example_pool`, falling back to
    :func:`fitted_prompt`'s examples."""
    return QuestionPrompt(pool=example_pool(index, tokenizer), fallback=fitted_prompt(index, tokenizer).examples,
                          count=count)


def _relation_values(index: Any, tokenizer: "VocabularyLike") -> Callable[[str], dict[str, list[str]]]:
    """subject -> {relation label: up to 4 object labels} for up to 20 of its relations, each
    subject read from the index once (the examples ask for the same subjects again)."""
    known: dict[str, dict[str, list[str]]] = {}

    def values(subject: str) -> dict[str, list[str]]:
        if subject not in known:
            known[subject] = {rel.label: [x.label for x in objects(index, tokenizer, subject, rel.label, limit=4)]
                              for rel in relations(index, tokenizer, subject, limit=20)}
        return known[subject]

    return values
