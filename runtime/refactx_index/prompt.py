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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

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


def final_answer(text: str) -> str:
    """The text after the last ``Answer:`` line of a generated reply (``""`` when none)."""
    found = [m.group(1).strip() for m in re.finditer(r"^\s*Answer:(.*)$", text, flags=re.MULTILINE)]
    return found[-1] if found else ""
