"""The N-Triples grammar of the parse stage written as one Java regular expression,
and literal unescaping written in Python: the reference the JVM lexer
(``NTriplesLexer``) is checked against. Tests only: the lexer does the work.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from refactx_pipeline.stages.parse import BNODE, HEX, IRI_CHAR, LANG_TAG

# the escapes of refactx_pipeline.parse.VALID_ESCAPE, except that a \u high surrogate must be
# followed by a \u low surrogate and a low surrogate may not stand alone
PAIRED_ESCAPE = (
    r"""\\(?:[tbnrf"'\\]"""
    r"|u(?:[0-9A-Ca-cEeFf]" + HEX + "{3}|[Dd][0-7]" + HEX + "{2}"
    r"|[Dd][89ABab]" + HEX + r"{2}\\u[Dd][C-Fc-f]" + HEX + "{2})"
    r"|U(?:000" + HEX + "|0010)" + HEX + "{4})"
)
# the groups of the full-line pattern, in order (an absent group is an empty string)
LINE_GROUPS = ("sid", "p", "pid", "o", "oitem", "oent", "body", "lang", "dt")
# no group of a matched line can hold a line feed (IRIs exclude controls, bodies LF/CR)
GROUP_SEPARATOR = "\n"


def line_pattern(entity_namespace: str, direct_claim_namespace: str) -> str:
    """One pattern for a whole valid line, capturing ``LINE_GROUPS``: subject id,
    predicate IRI, direct-claim property id, object IRI or blank node, object item
    id, other object entity id, literal body, language tag, datatype IRI.
    Possessive quantifiers: a 100 KB literal never recurses deeply."""
    ent, dc = re.escape(entity_namespace), re.escape(direct_claim_namespace)
    any_iri = "<" + IRI_CHAR + "*+>"
    body_char = r'[^"\\\n\r]'
    body = body_char + "*+(?:" + PAIRED_ESCAPE + body_char + "*+)*+"
    subject = "(?:<" + ent + "([QP][1-9][0-9]*)>|" + any_iri + "|" + BNODE + ")"
    predicate = "(<" + dc + "(P[1-9][0-9]*)>|" + any_iri + ")"
    entity = "(Q[1-9][0-9]*)|([PL][1-9][0-9]*(?:-[FS][1-9][0-9]*)?)"
    node = "(<" + ent + "(?:" + entity + ")>|" + any_iri + "|" + BNODE + ")"
    literal = '"(' + body + ')"(?:@(' + LANG_TAG + r")|\^\^(" + any_iri + "))?"
    return r"^[ \t\r]*" + subject + r"[ \t]+" + predicate + r"[ \t]+(?:" + node + "|" + literal + r")[ \t]*\.[ \t\r]*\z"


def match_lines(lines: DataFrame, entity_namespace: str, direct_claim_namespace: str) -> DataFrame:
    """``value`` plus ``ok`` (the line matches and is valid UTF-8) and the
    ``LINE_GROUPS`` (meaningful only where ``ok``), by one regex per line."""
    pattern = line_pattern(entity_namespace, direct_claim_namespace)
    groups = GROUP_SEPARATOR.join(f"${i}" for i in range(1, len(LINE_GROUPS) + 1))
    fields = F.split(F.regexp_replace(F.col("value"), pattern, groups), GROUP_SEPARATOR)
    df = lines.select("value", fields.alias("fields"))
    ok = (F.size("fields") == len(LINE_GROUPS)) & F.is_valid_utf8(F.col("value"))
    return df.select("value", ok.alias("ok"),
                     *[F.get(F.col("fields"), i).alias(name) for i, name in enumerate(LINE_GROUPS)])


_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.S)
_SIMPLE = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def unescape_literal(text: str) -> str:
    """A valid literal body's escapes decoded; a surrogate pair written as two \\u
    escapes is joined, a surrogate written as one \\U escape becomes U+FFFD."""
    def replace(m: re.Match) -> str:
        hex4, hex8, simple = m.groups()
        if simple is not None:
            return _SIMPLE[simple]
        code = int(hex4 or hex8, 16)
        return "\ufffd" if hex8 and 0xD800 <= code <= 0xDFFF else chr(code)

    out = _ESCAPE.sub(replace, text)
    return out.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
