"""Parquet contracts between the stages (under ``<build_root>/<source>/<dump_date>/``).

Each stage writes the datasets named here plus ``<stage>/counts.json``.
Identifiers are bare Wikidata ids (``Q42``, ``P31``).
"""

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

# parse/statements -- one row per kept truthy statement
STATEMENTS = StructType(
    [
        StructField("subject", StringType(), False),  # Q id
        StructField("property", StringType(), False),  # P id
        # item | string | time | quantity | coordinate | monolingual | other
        StructField("object_kind", StringType(), False),
        StructField("object_item", StringType(), True),  # Q id when object_kind = item
        StructField("object_value", StringType(), True),  # unescaped lexical value
        StructField("object_datatype", StringType(), True),  # datatype IRI of a literal
        StructField("object_lang", StringType(), True),  # language tag of a literal
    ]
)

# parse/terms -- labels, descriptions, aliases in the configured languages
TERMS = StructType(
    [
        StructField("entity", StringType(), False),  # Q or P id
        StructField("kind", StringType(), False),  # label | description | alias
        StructField("lang", StringType(), False),
        StructField("value", StringType(), False),
    ]
)

# parse/properties -- one row per property seen (datatype from propertyType lines
# or the configured property table; label in the first configured language)
PROPERTIES = StructType(
    [
        StructField("property", StringType(), False),
        StructField("datatype", StringType(), True),  # WikibaseItem, String, Time, ...
        StructField("label", StringType(), True),
    ]
)

# <stage>/rejects -- malformed or refused input, with the reason
REJECTS = StructType(
    [
        StructField("source", StringType(), True),  # file name
        StructField("line", StringType(), True),  # the raw line (truncated to 10,000 chars)
        StructField("reason", StringType(), False),
    ]
)

# sitelinks/sitelinks -- English Wikipedia title per item
SITELINKS = StructType(
    [
        StructField("entity", StringType(), False),
        StructField("title", StringType(), False),  # underscores replaced by spaces
        StructField("short_description", StringType(), True),
    ]
)

# labels/labels -- one display label per entity (items and properties)
LABELS = StructType(
    [
        StructField("entity", StringType(), False),
        StructField("label", StringType(), False),
        StructField("label_source", StringType(), False),  # wikipedia | label_description | label
    ]
)

# verbalize/facts -- de-duplicated textual facts (and paths/paths, the texts of a path build)
FACTS = StructType(
    [
        StructField("fact_id", LongType(), False),  # stable 64-bit hash of text
        StructField("text", StringType(), False),  # <s> <p> <o> .
        StructField("kind", StringType(), False),  # statement | description | short_description | inverse; paths/paths: path
        StructField("property", StringType(), True),
    ]
)

# verbalize/provenance -- one row per (fact, source): every statement or description a kept
# fact was verbalized from (a text read from several sources has several rows). Ids are the
# source's: Q/P ids, or a graph's own ids (without the graph stage's "E:" prefix)
PROVENANCE = StructType(
    [
        StructField("fact_id", LongType(), False),  # the fact's FACTS.fact_id
        # statement | inverse | description | short_description (refactx_index.tree.provenance.KINDS)
        StructField("kind", StringType(), False),
        StructField("subject", StringType(), False),  # the statement's subject / the described entity
        StructField("property", StringType(), True),  # the statement's property (null: a description)
        StructField("object", StringType(), True),  # the statement's item object
        StructField("value", StringType(), True),  # a literal object as read, or the description
    ]
)

# tokenize/<vocabulary>/tokens -- token ids of fact_prefix + text + fact_suffix
TOKENS = StructType(
    [
        StructField("fact_id", LongType(), False),
        StructField("token_ids", ArrayType(IntegerType(), False), False),
    ]
)

# prefix_rows/<vocabulary>/rows -- exactly one row per stored prefix
ROWS = StructType(
    [
        StructField("prefix", BinaryType(), False),  # refactx_index.tree.format.encode_prefix
        StructField("node", BinaryType(), False),  # refactx_index.tree.format fragment
        StructField("depth", IntegerType(), False),  # prefix length in tokens
        StructField("leaves", LongType(), False),  # facts below the prefix
    ]
)
