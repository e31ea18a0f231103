"""Python twins of the verbalize stage's rendering (``verbalize.py``, Spark SQL expressions).

The in-process build of a corporate graph (``graph/index.py``) runs without Spark, so it
renders literals and writes facts with these functions. They follow the Spark expressions
rule for rule: the same regular expressions (Java's ``\\d`` and ``\\s`` are ASCII, here
spelled as classes; Java's ``(?U)\\s`` is Unicode White_Space), Spark's ``trim`` (spaces
only). ``tests/pipeline/test_graph.py`` checks them against every example of docs/verbalize.md, and
the equality test against the Spark path on a whole graph.
"""

from __future__ import annotations

import re

# the fact labels and kinds both engines write (verbalize.py imports them from here, so the
# in-process build imports no Spark)
DESCRIPTION_LABEL = "description"
SHORT_DESCRIPTION_LABEL = "short description"
# When two sources yield the same text, the fact keeps the first kind in this order.
KIND_ORDER = ("statement", "inverse", "description", "short_description")
# the prefix of entity ids in the parse/labels datasets of a graph build (graph/rules.py uses
# it; verbalize removes it from the provenance ids): verbalize reads a label of an id starting
# with "P" as a property label, and a graph's ids are free-form
ENTITY_PREFIX = "E:"

# Java (?U)\s: the Unicode White_Space property (Python's \s also takes U+001C..U+001F)
_SPACES = re.compile("[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
_TIME = re.compile(r"^([+-]?)([0-9]+)-([0-9]{2})-([0-9]{2})(?:T.*)?$")
_DECIMAL = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?)([0-9]+))?$")
_POINT = re.compile(r"^[ \t\n\x0b\f\r]*(?:<([^>]*)>[ \t\n\x0b\f\r]*)?(?i:point)[ \t\n\x0b\f\r]*\("
                    r"[ \t\n\x0b\f\r]*([^ \t\n\x0b\f\r]+)[ \t\n\x0b\f\r]+([^ \t\n\x0b\f\r]+)[ \t\n\x0b\f\r]*\)"
                    r"[ \t\n\x0b\f\r]*$")


def spark_trim(text: str) -> str:
    """Spark SQL ``trim``: leading and trailing spaces (U+0020 only)."""
    return text.strip(" ")


def clean_text(text: str) -> str:
    """``verbalize.clean_text``: whitespace runs to one space, trimmed."""
    return spark_trim(_SPACES.sub(" ", text))


def render_decimal(text: str) -> str | None:
    """``verbalize.render_decimal``: ``+1.500`` -> ``1.5``; None if not a decimal."""
    value = spark_trim(text)
    m = _DECIMAL.search(value)
    if m is None or not re.search("[0-9]", value):
        return None
    sign, integer, fraction, exp_sign, exp_digits = (g or "" for g in m.groups())
    integer = integer.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    exp_digits = exp_digits.lstrip("0")
    is_zero = integer == "0" and fraction == ""
    mantissa = ("-" if sign == "-" and not is_zero else "") + integer + ("." + fraction if fraction else "")
    exponent = "e" + ("-" if exp_sign == "-" else "") + exp_digits if exp_digits and not is_zero else ""
    return mantissa + exponent


def render_time(text: str) -> str | None:
    """``verbalize.render_time``: ``+1952-03-11T00:00:00Z`` -> ``1952-03-11``; None if not a date."""
    m = _TIME.search(spark_trim(text))
    if m is None:
        return None
    sign, digits, month, day = m.groups()
    digits = digits.lstrip("0")
    year = ("-" if sign == "-" else "") + (digits.rjust(4, "0") if len(digits) < 4 else digits)
    if month == "00":
        return year
    if day == "00":
        return f"{year}-{month}"
    return f"{year}-{month}-{day}"


def render_coordinate(text: str) -> str | None:
    """``verbalize.render_coordinate``: ``Point(lon lat)`` -> ``lat, lon``; None if not a point."""
    m = _POINT.search(spark_trim(text))
    if m is None:
        return None
    lon, lat = render_decimal(m.group(2)), render_decimal(m.group(3))
    if lon is None or lat is None:
        return None
    return f"{lat}, {lon}"


def render_literal(kind: str, text: str) -> str | None:
    """``verbalize.render_object`` for a literal: the text as written in a fact, None when it
    cannot be rendered (empty, or not a date/decimal/point for those kinds)."""
    if kind == "time":
        rendered = render_time(text)
    elif kind == "quantity":
        rendered = render_decimal(text)
    elif kind == "coordinate":
        rendered = render_coordinate(text)
    else:
        rendered = clean_text(text)
    return rendered or None


def fact_text(subject: str, predicate: str, obj: str) -> str:
    """``verbalize.fact_text``: ``<subject> <predicate> <object> .``"""
    return f"<{subject}> <{predicate}> <{obj}> ."
