"""Answer quality: a question file answered with the fact constraint and without, scored.

Question files are read by one reader interface (:class:`QuestionReader`, :data:`READERS`):

- **jsonl**, this project's own, one question a line::

    {"question": "Who owns Copperleaf Trust Inc?", "type": "inverse",
     "answers": [{"label": "Quayside Group Inc", "aliases": ["Quayside"], "id": "CO0012"}],
     "fact_ids": [123456789]}

  ``answers`` items may also be plain strings; ``type`` (default ``all``), ``id``,
  ``fact_ids``, ``topic`` (the question's entity, as labelled in the index) and ``hop`` are
  optional. ``refactx-pipeline questions`` writes such files.
- **metaqa**, the MetaQA benchmark's own (``qa_dev.txt``): ``question with the [topic
  entity]<TAB>answer|answer|...``; the question type of each line is the same line of the
  ``*_qtype.txt`` file beside it (when there is one), the hop its folder's (``2-hop``). The
  model reads the question without the brackets.

A line that is not a question is counted with its line number and reason (:class:`Rejected`)
and the others are read; a file with no question at all is an error. Files are read a line
at a time, each line at most :data:`MAX_LINE_BYTES` bytes, checked before it is decoded: a
longer line, or one that is not UTF-8 text (a binary file), is an error that names the file
and the line, found without reading the rest of the file.

Each question is answered twice by :func:`refactx_index.qa.ask.ask` with the same prompt and
decoding, constrained and not ("LLM-only"), and scored the paper's way (docs/evaluation.md):

- an answer is **right** when, normalized (:func:`normalize`), it equals a gold label or
  alias, normalized alike: exact match, so a right answer with extra words is wrong;
- it is **not answered** when it says "I don't know" or when generation was cut by the
  token limit before an answer was finished (the reply used every new token and has no
  ``Answer:`` line, or ends inside it: :func:`was_cut`); an empty answer (no ``Answer:``
  line, or an empty one, at a natural end) is answered and wrong;
- a list answer (``A, B and C``; items split at ``,`` ``;`` ``|`` and `` and `` when the
  whole answer is no gold answer) is right when every item is gold;
- **Hits@1** (the benchmark's metric): the first answer given (the whole answer when it is a
  gold one, else the list's first item) is a gold one;
- **A** = right / all questions, **P** = right / answered questions;
- **supported**: an answered question whose answer equals the object of a stored fact the
**facts stored**: the share of written facts the index holds (100 % when
  constrained, by construction of the constraint; a fact the token limit cut is not counted
  as written);
- **gold ids**: where a question has ``fact_ids``, the answer is also scored by ids
  (``id_right``: one of the stored facts written is a gold fact; a stored fact's id is
  verbalize's ``fact_id`` of its text, :func:`refactx_index.tree.provenance.fact_id`); a question
  without ``fact_ids``, or a reply without a stored fact, is not scored by id.

Questions with a ``topic`` are checked against the index before they are answered
(:func:`check_support`): whether it holds a fact about the topic (``topic_found``), and
whether every gold answer lies within the question's hops of it (``supported_by_index``). A
question the index cannot answer exactly is scored but reported apart (``apart``), not in
``all``. Every answer that is not a hit is put down to one failure (:data:`FAILURES`).

Everything is reported overall, per hop and per question type, as JSON, a Markdown table and
a PNG plot (the ``eval`` extra's matplotlib).
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence

from ..errors import InputRefused
from ..prompting.prompt import UNKNOWN
from ..tree.explore import enumerate_facts
from ..tree.provenance import fact_id
from .ask import ask
from .policies import PLAIN, Policy

if TYPE_CHECKING:
    from ..vocab import VocabularyLike

MODES = ("constrained", "unconstrained")
_ARTICLES = {"a", "an", "the"}
_TRAILING_PARENTHESES = re.compile(r"\s*\([^()]*\)\s*$")
_NOT_WORD = re.compile(r"[^\w]+")
# the longest line a question file may hold (a question is at most 2,000 characters; its
# answers, aliases and fact ids take the rest)
MAX_LINE_BYTES = 1 << 20


def normalize(text: str) -> str:
    """The form answers are compared in: Unicode NFKC, a final full stop (or ``!?;:,``)
    dropped, the display label's parenthesized description at the end removed (``Berlin (capital of Germany)`` -> ``Berlin``), case
    folded, punctuation replaced by spaces, the articles a / an / the dropped, spaces collapsed."""
    text = unicodedata.normalize("NFKC", text).strip().rstrip(".!?;:, ")
    while True:
        stripped = _TRAILING_PARENTHESES.sub("", text)
        if stripped == text or not stripped:
            break
        text = stripped
    words = _NOT_WORD.sub(" ", text.casefold()).replace("_", " ").split()
    return " ".join(w for w in words if w not in _ARTICLES)


_UNKNOWN = normalize(UNKNOWN)


@dataclass(frozen=True)
class Question:
    """One question of a question file."""

    question: str
    answers: tuple[str, ...]  # gold labels and aliases
    type: str = "all"
    id: str | None = None
    fact_ids: tuple[int, ...] = ()
    topic: str | None = None  # the question's entity, as the index labels it
    hop: str | None = None  # "1-hop", "2-hop", ...

    @property
    def gold(self) -> frozenset[str]:
        return frozenset(normalize(a) for a in self.answers) - {""}

    @property
    def hops(self) -> int:
        m = re.match(r"(\d+)", self.hop or "")
        return int(m.group(1)) if m else 1


@dataclass(frozen=True)
class Rejected:
    """A line of a question file that is no question."""

    source: str
    line: int
    reason: str


@dataclass
class QuestionFile:
    questions: list[Question]
    rejected: list[Rejected]


class QuestionReader(Protocol):
    """Reads one benchmark's question files."""

    def accepts(self, path: Path, head: str) -> bool:
        """Whether a file (``head``: its first non-blank line) is in this reader's format."""

    def read(self, path: Path) -> QuestionFile:
        """Its questions, and the lines that are none (counted, never fatal)."""


def read_lines(path: Path, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """(line number, text without its end of line) of each line of ``path``; a line over
    ``max_bytes`` bytes or not UTF-8 raises :class:`InputRefused` naming the file and line,
    having read at most ``max_bytes + 1`` bytes of it."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputRefused(f"{path}: {exc.strerror or exc}") from None
    with fh:
        n = 0
        while True:
            try:
                raw = fh.readline(max_bytes + 1)
            except OSError as exc:
                raise InputRefused(f"{path}: {exc.strerror or exc}") from None
            if not raw:
                return
            n += 1
            if len(raw) > max_bytes:
                raise InputRefused(f"{path}: line {n} is longer than {max_bytes} bytes: not a question file")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputRefused(f"{path}: line {n} is not UTF-8 text (a byte {raw[exc.start]:#04x} at column "
                                   f"{exc.start + 1}): not a question file") from None
            yield n, text.rstrip("\r\n")


class JsonlReader:
    def accepts(self, path: Path, head: str) -> bool:
        return path.suffix in (".jsonl", ".json") or head.lstrip().startswith("{")

    def read(self, path: Path) -> QuestionFile:
        out = QuestionFile([], [])
        for n, line in read_lines(path):
            if not line.strip():
                continue
            try:
                out.questions.append(question_from_json(json.loads(line)))
            except RecursionError:
                out.rejected.append(Rejected(path.name, n, "not a question: JSON nested too deeply"))
            except (ValueError, TypeError, KeyError) as exc:
                out.rejected.append(Rejected(path.name, n, f"not a question: {exc}"))
        return out


_TOPIC = re.compile(r"\[([^\[\]]*)\]")


class MetaQAReader:
    """``question [topic]<TAB>ans|ans``; types from ``<name>_qtype.txt`` beside the file."""

    def accepts(self, path: Path, head: str) -> bool:
        return "\t" in head and _TOPIC.search(head) is not None

    @staticmethod
    def qtype_file(path: Path) -> Path:
        return path.with_name(f"{path.stem}_qtype{path.suffix}")

    def read(self, path: Path) -> QuestionFile:
        m = re.search(r"(\d+)-hop", str(path.parent.name))
        hop = f"{m.group(1)}-hop" if m else None
        lines = [line for _, line in read_lines(path)]
        qtypes: list[str] | None = None
        if self.qtype_file(path).is_file():
            qtypes = [line for _, line in read_lines(self.qtype_file(path))]
            if len(qtypes) != len(lines):
                raise InputRefused(f"{path}: {len(lines)} lines but {len(qtypes)} in {self.qtype_file(path).name} "
                                   "(one question type a line, in the same order)")
        out = QuestionFile([], [])
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            reason = None
            fields = line.split("\t")
            topics = _TOPIC.findall(fields[0])
            answers = [a.strip() for a in fields[1].split("|")] if len(fields) == 2 else []
            if len(fields) != 2:
                reason = f"{len(fields)} tab-separated fields (expected question and answers)"
            elif len(topics) != 1:
                reason = "no [topic entity] in the question" if not topics else "more than one [topic entity]"
            elif not topics[0].strip():
                reason = "an empty [topic entity]"
            elif not any(normalize(a) for a in answers):
                reason = "no gold answer"
            if reason:
                out.rejected.append(Rejected(path.name, n, reason))
                continue
            text = " ".join(_TOPIC.sub(lambda t: t.group(1), fields[0]).split())
            qtype = (qtypes[n - 1].strip() if qtypes else "") or (hop or "all")
            out.questions.append(Question(question=text, answers=tuple(a for a in answers if a), type=qtype,
                                          id=f"{hop or path.stem}:{n}", topic=topics[0].strip(), hop=hop))
        return out


READERS: dict[str, QuestionReader] = {"jsonl": JsonlReader(), "metaqa": MetaQAReader()}


def read_question_file(path: str | Path, fmt: str = "auto") -> QuestionFile:
    """The questions of ``path`` by the reader of ``fmt`` (``auto``: the first that accepts it)."""
    path = Path(path)
    head = next((line for _, line in read_lines(path) if line.strip()), "")
    if fmt == "auto":
        fmt = next((name for name, reader in READERS.items() if reader.accepts(path, head)), "")
        if not fmt:
            raise InputRefused(f"{path}: not a question file of a known format ({', '.join(READERS)})")
    if fmt not in READERS:
        raise InputRefused(f"unknown question format {fmt!r}: one of {', '.join(READERS)}")
    read = READERS[fmt].read(path)
    if not read.questions:
        raise InputRefused(f"{path}: no questions" + (f" ({len(read.rejected)} lines rejected, the first: line "
                                                      f"{read.rejected[0].line}: {read.rejected[0].reason})"
                                                      if read.rejected else ""))
    return read


def read_questions(path: str | Path, fmt: str = "auto") -> list[Question]:
    """The questions of a question file (the lines that are none left out: see
    :func:`read_question_file` for them)."""
    return read_question_file(path, fmt).questions


def stratified_sample(questions: Sequence[Question], per_hop: int, seed: int = 0) -> list[Question]:
    """``per_hop`` questions of each hop (all of a smaller one), drawn with ``seed``, in file order."""
    by_hop: dict[str | None, list[int]] = {}
    for i, q in enumerate(questions):
        by_hop.setdefault(q.hop, []).append(i)
    rng = random.Random(seed)
    chosen = sorted(i for hop in sorted(by_hop, key=str) for i in
                    (rng.sample(by_hop[hop], per_hop) if len(by_hop[hop]) > per_hop else by_hop[hop]))
    return [questions[i] for i in chosen]


def question_from_json(doc: Any) -> Question:
    if not isinstance(doc, dict):
        raise InputRefused("a line must be a JSON object")
    text = doc["question"]
    if not isinstance(text, str) or not text.strip():
        raise InputRefused("'question' must be non-empty text")
    names: list[str] = []
    for answer in doc.get("answers") or []:
        if isinstance(answer, str):
            names.append(answer)
        elif isinstance(answer, dict) and isinstance(answer.get("label"), str):
            names.append(answer["label"])
            names += [a for a in answer.get("aliases") or [] if isinstance(a, str)]
        else:
            raise InputRefused(f"an answer must be text or {{'label': ..., 'aliases': [...]}}, not {answer!r}")
    if not any(normalize(n) for n in names):
        raise InputRefused("'answers' holds no gold answer")
    topic, hop = doc.get("topic"), doc.get("hop")
    return Question(question=text, answers=tuple(names), type=str(doc.get("type") or "all"),
                    id=doc.get("id"), fact_ids=tuple(int(i) for i in doc.get("fact_ids") or ()),
                    topic=topic if isinstance(topic, str) and topic.strip() else None,
                    hop=str(hop) if hop is not None else None)


def fact_parts(text: str) -> list[str] | None:
    """The elements of a fact text ``<s> <p> <o> .`` (None when the text has no such shape)."""
    body = text.strip()
    if body.endswith("."):
        body = body[:-1].rstrip()
    if not (body.startswith("<") and body.endswith(">")):
        return None
    parts = body[1:-1].split("> <")
    return parts if len(parts) >= 3 else None


def fact_object(text: str) -> str | None:
    """The object of a fact text ``<s> <p> <o> .`` (None when the text has no such shape)."""
    parts = fact_parts(text)
    return parts[-1] if parts else None


def fact_subject(text: str) -> str | None:
    parts = fact_parts(text)
    return parts[0] if parts else None


_LIST = re.compile(r"\s*(?:[,;|]|\band\b)\s*")


def answer_items(text: str) -> list[str]:
    """A list answer's items, normalized (``A, B and C`` -> ``[a, b, c]``)."""
    return [n for item in _LIST.split(text) if (n := normalize(item))]


def was_cut(reply: str, answer: str, generated_tokens: int, max_new_tokens: int) -> bool:
    """Whether the token limit cut the answer: every new token used, and no ``Answer:`` line
    written, or the ``Answer:`` line is the reply's last (it may have been cut inside)."""
    if generated_tokens < max_new_tokens:
        return False
    last = (reply.rstrip().splitlines() or [""])[-1]
    return not answer or last.strip().startswith("Answer:")


@dataclass
class Scored:
    """One answer, scored."""

    id: str | None
    type: str
    question: str
    answer: str
    right: bool
    answered: bool
    unknown: bool
    cut: bool
    supported: bool
    facts: int
    facts_stored: int
    seconds: float
    id_right: bool | None = None  # None: not scored by ids (one side has none)
    fact_texts: list[str] = field(default_factory=list)
    hits1: bool = False
    hop: str | None = None
    topic_found: bool | None = None  # None: the question names no topic
    supported_by_index: bool | None = None  # every gold answer within its hops of the topic
    failure: str | None = None  # why it is no hit (FAILURES); None for a hit


# why an answer is no hit, the first that applies
FAILURES = ("cut_by_token_limit", "no_fact_written", "gold_in_a_fact_other_answer_text", "other_subject",
            "first_hop_only", "topic_other_facts", "unknown_after_facts", "wrong_without_topic")


def failure_of(question: Question, said: str, unknown: bool, cut: bool, facts: Sequence[Any]) -> str:
    """The failure of an answer that is no hit (:data:`FAILURES`): cut by the token limit; no
    fact written; a written fact holds a gold answer (as subject or object) but the answer
    says something else; no written fact is about the question's topic; (a question of two
    hops or more) facts about the topic but none that starts from one of their objects;
    facts about the topic, none with a gold answer (one hop: the question's subject, another
    relation); "I don't know" after facts; (no topic to tell) wrong."""
    if cut:
        return "cut_by_token_limit"
    if not facts:
        return "no_fact_written"
    parts = [p for f in facts if (p := fact_parts(f.text))]
    if any(normalize(p[0]) in question.gold or normalize(p[-1]) in question.gold for p in parts):
        return "gold_in_a_fact_other_answer_text"
    if question.topic is None:
        return "unknown_after_facts" if unknown else "wrong_without_topic"
    topic = normalize(question.topic)
    if not any(normalize(p[0]) == topic for p in parts):
        return "other_subject"
    if question.hops >= 2:
        reached = {normalize(p[-1]) for p in parts if normalize(p[0]) == topic}
        if not any(normalize(p[0]) in reached for p in parts):
            return "first_hop_only"
    return "unknown_after_facts" if unknown else "topic_other_facts"


def score(question: Question, answer_text: str, facts: Sequence[Any], cut: bool, seconds: float,
          support: tuple[bool | None, bool | None] = (None, None)) -> Scored:
    """Score one reply: ``facts`` are :class:`refactx_index.qa.ask.GeneratedFact` (``text``,
    ``stored``), ``cut`` whether generation hit the token limit, ``support`` what
    :func:`check_support` found (topic found, gold answers within reach)."""
    facts = [f for f in facts if getattr(f, "complete", True)]  # a fact cut by the token limit was not written
    said = normalize(answer_text)
    unknown = said == _UNKNOWN or said.startswith(_UNKNOWN + " ")
    answered = not unknown and not cut
    items = [] if said in question.gold else answer_items(answer_text)
    right = answered and (said in question.gold or (len(items) > 1 and all(i in question.gold for i in items)))
    hits1 = answered and (said in question.gold or (bool(items) and items[0] in question.gold))
    stored_objects = {normalize(o) for f in facts if f.stored and (o := fact_object(f.text)) is not None}
    supported = answered and bool(said) and (said in stored_objects or (right and bool(stored_objects & question.gold)))
    written_ids = {fact_id(f.text) for f in facts if f.stored}
    id_right = bool(written_ids & set(question.fact_ids)) if question.fact_ids and written_ids else None
    return Scored(id=question.id, type=question.type, question=question.question, answer=answer_text,
                  right=right, answered=answered, unknown=unknown, cut=cut, supported=supported,
                  facts=len(facts), facts_stored=sum(bool(f.stored) for f in facts), seconds=seconds,
                  id_right=id_right, fact_texts=[f.text for f in facts], hits1=hits1, hop=question.hop,
                  topic_found=support[0], supported_by_index=support[1],
                  failure=None if hits1 else failure_of(question, said, unknown, cut, facts))


class SupportCheck:
    """What the index can answer: the objects of each entity's facts (``<e> <r> <o> .``, an
    entity's first ``max_facts`` facts), followed up to a question's hops from its topic."""

    def __init__(self, index: Any, tokenizer: "VocabularyLike", max_facts: int = 1000):
        self.index, self.tokenizer, self.max_facts = index, tokenizer, max_facts
        self._objects: dict[str, frozenset[str]] = {}

    def objects(self, entity: str) -> frozenset[str]:
        found = self._objects.get(entity)
        if found is None:
            found = frozenset(parts[-1] for text, _ in enumerate_facts(self.index, self.tokenizer, f"<{entity}> <",
                                                                       limit=self.max_facts)
                              if (parts := fact_parts(text)) and parts[0] == entity)
            self._objects[entity] = found
        return found

    def __call__(self, question: Question) -> tuple[bool | None, bool | None]:
        """(topic found, every gold answer within the question's hops); (None, None) without a topic."""
        if question.topic is None:
            return None, None
        frontier = self.objects(question.topic)
        if not frontier:
            return False, False
        reached = set(frontier)
        for _ in range(question.hops - 1):
            frontier = frozenset(o for e in frontier for o in self.objects(e)) - reached
            reached |= frontier
        return True, question.gold <= {normalize(o) for o in reached}


def check_support(questions: Sequence[Question], index: Any, tokenizer: "VocabularyLike") -> list[tuple[bool | None, bool | None]]:
    check = SupportCheck(index, tokenizer)
    return [check(q) for q in questions]


def summarize(scored: Iterable[Scored]) -> dict[str, Any]:
    """A, P and the other figures of a group of scored answers."""
    rows = list(scored)
    n = len(rows)
    right = sum(r.right for r in rows)
    answered = sum(r.answered for r in rows)
    facts = sum(r.facts for r in rows)
    stored = sum(r.facts_stored for r in rows)
    by_id = [r.id_right for r in rows if r.id_right is not None]
    hits = sum(r.hits1 for r in rows)
    return {
        "questions": n, "right": right, "answered": answered, "hits1": hits,
        "Hits@1": round(hits / n, 4) if n else None,
        "unknown": sum(r.unknown for r in rows), "cut": sum(r.cut for r in rows),
        "A": round(right / n, 4) if n else None,
        "P": round(right / answered, 4) if answered else None,
        "supported": sum(r.supported for r in rows),
        "supported_share": round(sum(r.supported for r in rows) / answered, 4) if answered else None,
        "facts_per_question": round(facts / n, 3) if n else None,
        "facts_stored_share": round(stored / facts, 4) if facts else None,
        "seconds_per_question": round(sum(r.seconds for r in rows) / n, 3) if n else None,
        "scored_by_id": len(by_id), "right_by_id": sum(by_id),
        "topic_not_in_index": sum(r.topic_found is False for r in rows),
        "failures": {f: c for f, c in sorted(Counter(r.failure for r in rows if r.failure).items(),
                                             key=lambda kv: FAILURES.index(kv[0]))},
    }


def report(results: dict[str, list[Scored]]) -> dict[str, Any]:
    """Per mode: ``all``, each hop's and each question type's summary over the questions the
    index can answer, and ``apart``: the questions it cannot (``supported_by_index`` false)."""
    out: dict[str, Any] = {}
    for mode, rows in results.items():
        kept = [r for r in rows if r.supported_by_index is not False]
        apart = [r for r in rows if r.supported_by_index is False]
        hops = sorted({r.hop for r in kept if r.hop})
        types = sorted({r.type for r in kept})
        out[mode] = {"all": summarize(kept), **{h: summarize(r for r in kept if r.hop == h) for h in hops},
                     **{t: summarize(r for r in kept if r.type == t) for t in types if t not in hops}}
        if apart:
            out[mode]["apart"] = summarize(apart)
    return out


class _Progress:
    """``eval constrained 12/50`` redrawn in place, on a terminal only."""

    def __init__(self, total: int, stream=None):
        self.stream = stream or sys.stderr
        self.total, self.done = total, 0
        self.live = self.stream.isatty()

    def advance(self, label: str, n: int) -> None:
        self.done += n
        if self.live:
            width = 30
            filled = width * self.done // max(self.total, 1)
            self.stream.write(f"\reval {label:<13} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


def evaluate(questions: Sequence[Question], index: Any, loaded: Any, *, modes: Sequence[str] = MODES,
             batch_size: int = 8, num_beams: int = 3, max_new_tokens: int = 128, prompt: Any = None,
             answer: Callable[..., list[Any]] | None = None, progress: bool = True,
             policies: "Sequence[Policy] | str" = PLAIN, **options: Any) -> dict[str, list[Scored]]:
    """Answer every question in each mode, ``batch_size`` at a time, and score each answer.
    ``answer`` is :func:`refactx_index.qa.ask.ask` unless given (same signature); ``policies``
    (:mod:`refactx_index.qa.policies`; default the plain mode, the constraint alone: a figure
    names the policies it measured) and ``options`` go to it. Questions with a topic are
    checked first (:func:`check_support`)."""
    if answer is None:
        answer = ask
    tokenizer = getattr(loaded, "tokenizer", None)
    support = (check_support(questions, index, tokenizer) if tokenizer is not None
               else [(None, None)] * len(questions))
    bar = _Progress(len(questions) * len(modes)) if progress else None
    results: dict[str, list[Scored]] = {}
    try:
        for mode in modes:
            if mode not in MODES:
                raise InputRefused(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
            rows: list[Scored] = []
            for start in range(0, len(questions), batch_size):
                batch = questions[start:start + batch_size]
                started = time.perf_counter()
                replies = answer([q.question for q in batch], index, loaded, prompt=prompt, num_beams=num_beams,
                                 max_new_tokens=max_new_tokens, constrained=mode == "constrained", policies=policies,
                                 **options)
                each = (time.perf_counter() - started) / len(batch)
                for i, (q, reply) in enumerate(zip(batch, replies)):
                    cut = was_cut(reply.reply, reply.answer, reply.generated_tokens, max_new_tokens)
                    rows.append(score(q, reply.answer, reply.facts, cut, each, support[start + i]))
                if bar:
                    bar.advance(mode, len(batch))
            results[mode] = rows
    finally:
        if bar:
            bar.close()
    return results


def markdown_table(summary: dict[str, Any]) -> str:
    """One row per mode and group (all, hop, question type, apart): Hits@1, A, P, answered,
    supported, facts, stored, s/question."""
    lines = ["| mode | group | questions | Hits@1 | A | P | answered | supported | facts / question | facts stored "
             "| s / question |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(x: Any, percent: bool = False) -> str:
        if x is None:
            return "–"
        return f"{100 * x:.1f} %" if percent else (f"{x:.2f}" if isinstance(x, float) else str(x))

    for mode, by_type in summary.items():
        for kind, s in by_type.items():
            lines.append(f"| {mode} | {kind} | {s['questions']} | {cell(s['Hits@1'])} | {cell(s['A'])} | {cell(s['P'])} | "
                         f"{s['answered']} | {s['supported']} | {cell(s['facts_per_question'])} | "
                         f"{cell(s['facts_stored_share'], True)} | {cell(s['seconds_per_question'])} |")
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: str | Path, title: str = "") -> None:
    """Hits@1, A and P per group, constrained beside unconstrained (bars), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(summary)
    kinds = list(next(iter(summary.values())))
    legend_rows = -(-len(modes) // 4)  # the legend below the plots, four modes a row: bars stay uncovered
    fig, axes = plt.subplots(1, 3, figsize=(max(6, 1.6 * len(kinds)) * 3, 4 + 0.3 * legend_rows), sharey=True)
    width = 0.8 / max(len(modes), 1)
    for ax, metric in zip(axes, ("Hits@1", "A", "P")):
        for m, mode in enumerate(modes):
            values = [summary[mode].get(k, {}).get(metric) or 0 for k in kinds]
            bars = ax.bar([i + m * width for i in range(len(kinds))], values, width, label=mode)
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(kinds))], kinds)
        ax.set_ylim(0, 1.05)
        ax.set_title(metric)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=min(len(modes), 4))
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.3 * legend_rows / (4 + 0.3 * legend_rows) + 0.02, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(results: dict[str, list[Scored]], out_prefix: str | Path, meta: dict[str, Any],
                  plot_png: bool = True, plot_groups: Sequence[str] | None = None) -> dict[str, Any]:
    """``<prefix>.json`` (settings, summary, every answer), ``<prefix>.md`` and ``<prefix>.png``
    (of the groups ``plot_groups`` only, when given: all, the hops, ...)."""

    summary = report(results)
    prefix = Path(out_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    doc = {**meta, "summary": summary, "answers": {m: [asdict(r) for r in rows] for m, rows in results.items()}}
    prefix.with_suffix(".json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    prefix.with_suffix(".md").write_text(markdown_table(summary), encoding="utf-8")
    if plot_png:
        shown = summary if plot_groups is None else {
            mode: {g: groups[g] for g in plot_groups if g in groups} for mode, groups in summary.items()}
        plot(shown, prefix.with_suffix(".png"), title=str(meta.get("questions_file", meta.get("benchmark", ""))))
    return summary
