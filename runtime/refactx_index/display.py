"""Text for a terminal: a served index's completions and a constrained answer, as both
commands (``refactx`` and ``refactx-pipeline demo``) show them. The functions return the text;
the command prints it.

- :func:`format_completions`: the continuations of a text with their fact counts, and the
  first whole facts below it;
- :func:`format_answer`: an :class:`refactx_index.qa.ask.Answer`'s reply with each fact marked
  as stored or not, its final answer and its timings;
- :func:`quoted_head`: the start of a long text, quoted for a message.
"""

from __future__ import annotations

from .tree.explore import complete, enumerate_facts


def quoted_head(text: str, limit: int = 80) -> str:
    """``text`` quoted for a message: at most its first ``limit`` characters."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def format_completions(index, tokenizer, text: str, limit: int) -> tuple[str, int]:
    """The continuations of ``text`` with their leaf counts, and whole facts below it (at most
    ``limit`` of each), one a line; and the number of facts below ``text`` (0 when it is not in
    the index)."""

    continuations = complete(index, tokenizer, text, limit)
    total = sum(n for _, n in continuations)
    lines = [f"completions of {quoted_head(text)} ({len(continuations)} shown, most facts first):"]
    lines += [f"  {leaves:>8}  {continuation!r}" for continuation, leaves in continuations]
    facts = list(enumerate_facts(index, tokenizer, text, limit))
    if facts:
        lines.append("facts:")
        lines += [f"  {fact_text}" for fact_text, _ in facts]
    return "\n".join(lines) + "\n", total


def format_answer(answer) -> str:
    """The question, the reply with its facts marked (checked against the index), the final
    answer and the timings, one a line."""
    lines = [f"question: {answer.question}", "reply:"]
    facts = list(answer.facts)
    for line in answer.reply.splitlines() or [""]:
        mark = ""
        fact = next((f for f in facts if f.text and f.text in line), None)
        if fact is not None:
            facts.remove(fact)
            mark = "   [stored]" if fact.stored else (
                "   [incomplete]" if not fact.complete else "   [NOT STORED]")
        lines.append(f"  {line}{mark}")
    stored = sum(f.stored for f in answer.facts)
    lines.append(f"facts: {stored} of {len(answer.facts)} stored in the index")
    lines.append(f"answer: {answer.answer or '(no Answer: line)'}")
    t = answer.timings
    steps = max(int(t.get("steps", 0)), 1)
    lines.append(f"({answer.prompt_tokens} prompt tokens, {answer.generated_tokens} generated; model load "
                 f"{t.get('load_s', 0):.1f} s, generation {t['generate_s']:.1f} s, {t['ms_per_step']:.0f} ms/step, "
                 f"of which the fact constraint {1000 * t['processor_s'] / steps:.1f} ms/step)")
    return "\n".join(lines) + "\n"
