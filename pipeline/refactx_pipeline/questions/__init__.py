"""Question sets generated from a build's own facts (``refactx-pipeline questions``).

:mod:`.generate` reads the parse, labels and verbalize datasets of a build, keeps the
statements whose fact the verbalize stage stored, and samples template questions from them
(forward, inverse, yes/no, two-hop), stratified by type and property with a seed; the
templates are package data (``templates.json``; docs/questions.md).
"""

from .generate import QUESTION_TYPES, generate_questions, load_templates, run

__all__ = ["QUESTION_TYPES", "generate_questions", "load_templates", "run"]
