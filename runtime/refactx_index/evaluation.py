"""Answer quality: a question file answered with the fact constraint and without, scored.

A question file is JSONL, one question a line::

    {"question": "Who owns Copperleaf Trust Inc?", "type": "inverse",
     "answers": [{"label": "Quayside Group Inc", "aliases": ["Quayside"], "id": "CO0012"}],
     "fact_ids": [123456789]}

``answers`` items may also be plain strings; ``type`` (default ``all``), ``id`` and
``fact_ids`` are optional. ``refactx-pipeline questions`` writes such files.

Each question is answered twice by :func:`refactx_index.ask.ask` with the same prompt and
decoding, constrained and not ("LLM-only"), and scored the paper's way (docs/evaluation.md):

- an answer is **right** when, normalized (:func:`normalize`), it equals a gold label or
  alias, normalized alike: exact match, so a right answer with extra words is wrong;
- it is **not answered** when it says "I don't know" or when generation was cut by the
  token limit before an answer was finished (the reply used every new token and has no
  ``Answer:`` line, or ends inside it: :func:`was_cut`); an empty answer (no ``Answer:``
  line, or an empty one, at a natural end) is answered and wrong;
- **A** = right / all questions, **P** = right / answered questions;
- **supported**: an answered question whose answer equals the object of a stored fact the
**facts stored**: the share of written facts the index holds (100 % when
  constrained, by construction of the constraint; a fact the token limit cut is not counted
  as written);
- **gold ids**: where a question has ``fact_ids``, the answer is also scored by ids
  (``id_right``: one of the stored facts written is a gold fact; a stored fact's id is
  verbalize's ``fact_id`` of its text, :func:`refactx_index.provenance.fact_id`); a question
  without ``fact_ids``, or a reply without a stored fact, is not scored by id.

Everything is reported overall and per question type, as JSON, a Markdown table and a PNG
plot (the ``eval`` extra's matplotlib).
"""

from __future__ import annotations

import json
import re
import sys
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .errors import InputRefused
from .prompt import UNKNOWN
from .provenance import fact_id

MODES = ("constrained", "unconstrained")
_ARTICLES = {"a", "an", "the"}
_TRAILING_PARENTHESES = re.compile(r"\s*\([^()]*\)\s*$")
_NOT_WORD = re.compile(r"[^\w]+")


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

    @property
    def gold(self) -> frozenset[str]:
        return frozenset(normalize(a) for a in self.answers) - {""}


def read_questions(path: str | Path) -> list[Question]:
    """The questions of a JSONL file; a bad line is one error naming the file and line."""
    questions = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                questions.append(question_from_json(json.loads(line)))
            except (ValueError, TypeError, KeyError) as exc:
                raise InputRefused(f"{path}:{n}: not a question: {exc}") from None
    if not questions:
        raise InputRefused(f"{path}: no questions")
    return questions


def question_from_json(doc: Any) -> Question:
    if not isinstance(doc, dict):
        raise ValueError("a line must be a JSON object")
    text = doc["question"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError("'question' must be non-empty text")
    names: list[str] = []
    for answer in doc.get("answers") or []:
        if isinstance(answer, str):
            names.append(answer)
        elif isinstance(answer, dict) and isinstance(answer.get("label"), str):
            names.append(answer["label"])
            names += [a for a in answer.get("aliases") or [] if isinstance(a, str)]
        else:
            raise ValueError(f"an answer must be text or {{'label': ..., 'aliases': [...]}}, not {answer!r}")
    if not any(normalize(n) for n in names):
        raise ValueError("'answers' holds no gold answer")
    return Question(question=text, answers=tuple(names), type=str(doc.get("type") or "all"),
                    id=doc.get("id"), fact_ids=tuple(int(i) for i in doc.get("fact_ids") or ()))


def fact_object(text: str) -> str | None:
    """The object of a fact text ``<s> <p> <o> .`` (None when the text has no such shape)."""
    body = text.strip()
    if body.endswith("."):
        body = body[:-1].rstrip()
    if not (body.startswith("<") and body.endswith(">")):
        return None
    parts = body[1:-1].split("> <")
    return parts[-1] if len(parts) >= 3 else None


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


def score(question: Question, answer_text: str, facts: Sequence[Any], cut: bool, seconds: float) -> Scored:
    """Score one reply: ``facts`` are :class:`refactx_index.ask.GeneratedFact` (``text``,
    ``stored``), ``cut`` whether generation hit the token limit."""
    facts = [f for f in facts if getattr(f, "complete", True)]  # a fact cut by the token limit was not written
    said = normalize(answer_text)
    unknown = said == _UNKNOWN or said.startswith(_UNKNOWN + " ")
    answered = not unknown and not cut
    right = answered and said in question.gold
    stored_objects = {normalize(o) for f in facts if f.stored and (o := fact_object(f.text)) is not None}
    supported = answered and bool(said) and (said in stored_objects or (right and bool(stored_objects & question.gold)))
    written_ids = {fact_id(f.text) for f in facts if f.stored}
    id_right = bool(written_ids & set(question.fact_ids)) if question.fact_ids and written_ids else None
    return Scored(id=question.id, type=question.type, question=question.question, answer=answer_text,
                  right=right, answered=answered, unknown=unknown, cut=cut, supported=supported,
                  facts=len(facts), facts_stored=sum(bool(f.stored) for f in facts), seconds=seconds,
                  id_right=id_right, fact_texts=[f.text for f in facts])


def summarize(scored: Iterable[Scored]) -> dict[str, Any]:
    """A, P and the other figures of a group of scored answers."""
    rows = list(scored)
    n = len(rows)
    right = sum(r.right for r in rows)
    answered = sum(r.answered for r in rows)
    facts = sum(r.facts for r in rows)
    stored = sum(r.facts_stored for r in rows)
    by_id = [r.id_right for r in rows if r.id_right is not None]
    return {
        "questions": n, "right": right, "answered": answered,
        "unknown": sum(r.unknown for r in rows), "cut": sum(r.cut for r in rows),
        "A": round(right / n, 4) if n else None,
        "P": round(right / answered, 4) if answered else None,
        "supported": sum(r.supported for r in rows),
        "supported_share": round(sum(r.supported for r in rows) / answered, 4) if answered else None,
        "facts_per_question": round(facts / n, 3) if n else None,
        "facts_stored_share": round(stored / facts, 4) if facts else None,
        "seconds_per_question": round(sum(r.seconds for r in rows) / n, 3) if n else None,
        "scored_by_id": len(by_id), "right_by_id": sum(by_id),
    }


def report(results: dict[str, list[Scored]]) -> dict[str, Any]:
    """Per mode: ``all`` and each question type's summary."""
    out: dict[str, Any] = {}
    for mode, rows in results.items():
        types = sorted({r.type for r in rows})
        out[mode] = {"all": summarize(rows), **{t: summarize(r for r in rows if r.type == t) for t in types}}
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
             answer: Callable[..., list[Any]] | None = None, progress: bool = True) -> dict[str, list[Scored]]:
    """Answer every question in each mode, ``batch_size`` at a time, and score each answer.
    ``answer`` is :func:`refactx_index.ask.ask` unless given (same signature)."""
    if answer is None:
        from .ask import ask as answer
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
                                 max_new_tokens=max_new_tokens, constrained=mode == "constrained")
                each = (time.perf_counter() - started) / len(batch)
                for q, reply in zip(batch, replies):
                    cut = was_cut(reply.reply, reply.answer, reply.generated_tokens, max_new_tokens)
                    rows.append(score(q, reply.answer, reply.facts, cut, each))
                if bar:
                    bar.advance(mode, len(batch))
            results[mode] = rows
    finally:
        if bar:
            bar.close()
    return results


def markdown_table(summary: dict[str, Any]) -> str:
    """One row per mode and question type: A, P, answered, supported, facts, stored, s/question."""
    lines = ["| mode | type | questions | A | P | answered | supported | facts / question | facts stored | s / question |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def cell(x: Any, percent: bool = False) -> str:
        if x is None:
            return "–"
        return f"{100 * x:.1f} %" if percent else (f"{x:.2f}" if isinstance(x, float) else str(x))

    for mode, by_type in summary.items():
        for kind, s in by_type.items():
            lines.append(f"| {mode} | {kind} | {s['questions']} | {cell(s['A'])} | {cell(s['P'])} | "
                         f"{s['answered']} | {s['supported']} | {cell(s['facts_per_question'])} | "
                         f"{cell(s['facts_stored_share'], True)} | {cell(s['seconds_per_question'])} |")
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: str | Path, title: str = "") -> None:
    """A and P per question type, constrained beside unconstrained (bars), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(summary)
    kinds = list(next(iter(summary.values())))
    fig, axes = plt.subplots(1, 2, figsize=(max(6, 1.6 * len(kinds)) * 2, 4), sharey=True)
    width = 0.8 / max(len(modes), 1)
    for ax, metric in zip(axes, ("A", "P")):
        for m, mode in enumerate(modes):
            values = [summary[mode].get(k, {}).get(metric) or 0 for k in kinds]
            bars = ax.bar([i + m * width for i in range(len(kinds))], values, width, label=mode)
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(kinds))], kinds)
        ax.set_ylim(0, 1.05)
        ax.set_title(metric)
    axes[0].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(results: dict[str, list[Scored]], out_prefix: str | Path, meta: dict[str, Any],
                  plot_png: bool = True) -> dict[str, Any]:
    """``<prefix>.json`` (settings, summary, every answer), ``<prefix>.md`` and ``<prefix>.png``."""
    from dataclasses import asdict

    summary = report(results)
    prefix = Path(out_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    doc = {**meta, "summary": summary, "answers": {m: [asdict(r) for r in rows] for m, rows in results.items()}}
    prefix.with_suffix(".json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    prefix.with_suffix(".md").write_text(markdown_table(summary), encoding="utf-8")
    if plot_png:
        plot(summary, prefix.with_suffix(".png"), title=str(meta.get("questions_file", "")))
    return summary
