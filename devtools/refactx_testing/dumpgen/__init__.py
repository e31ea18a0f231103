"""A realistic Wikidata dump generator, for benchmarks and tests; deterministic by seed.

Writes, into one folder:

* ``wikidata-20240401-truthy-BETA.nt.bz2``: truthy N-Triples in the 2024 layout (the
  ``ontology#`` namespace, property entities with ``wikibase:propertyType``, per-entity
  ``Special:EntityData`` metadata, labels as ``rdfs:label`` + ``skos:prefLabel`` +
  ``schema:name``, literals with ``\\uXXXX`` escapes, ``direct-normalized`` lines beside
  external ids), a multi-stream ``.bz2`` (one independent stream per chunk, like pbzip2's);
* ``enwiki-20240401-page.sql.gz`` and ``enwiki-20240401-page_props.sql.gz``: MariaDB dumps
  of the English Wikipedia ``page`` and ``page_props`` tables (``CREATE TABLE`` then ~1 MB
  ``INSERT`` lines) that give the sitelinked items their titles and short descriptions;
* ``manifest.json``: the file names, what was written (items, lines, statements by
  datatype, sitelinks, the hostile lines by reason), what the pipeline's default
  configuration should make of it (``expected``) and, with ``skew_facts``, the hot label.

Distributions (docs/scale.md, "The dump generator"; ``python -m refactx_testing.dumpgen
--measure`` prints them from ../shared's real extracts, and from a generated dump with
``--measure --dump DIR``): a mix of item classes (scholarly articles, humans, taxa, ...)
each with its statements per item (a lognormal body and, for articles, a Pareto tail of
``cites work`` up to thousands), external ids the largest share of statements, hot
objects (``human``, ``scholarly article``, ``male``, ``English``... millions of
statements point to a handful of items at full scale), hot label prefixes (article
titles starting "Crystal structure of", "Effect of", ...), label and description lengths,
sitelink coverage, and a few hostile lines of each kind the parse stage must quarantine.

``skew_facts`` adds articles whose labels all start with ``HOT_LABEL`` until at least that
many facts lie below that one prefix (the skew benchmark).

``preset`` picks what the texts and values are drawn from: ``dense`` (the default: small
word lists) or ``realistic`` (``lexicon``: tens of thousands of title words and names, whose
vocabulary keeps growing with the dump as real facts' does); the plan (items, counts,
lines) is the same for both. ``floor`` measures how compressible verbalized facts are
(bench/bench_realism.py compares them with the real extract's).

Determinism: the same ``seed``, ``lines``, ``skew_facts``, ``line_mix``, ``preset`` and
``chunk_lines`` give byte-identical files, whatever the number of worker processes: a
plan of every item (class, id, counts) is computed from the seed alone, then each chunk
of items is rendered from its own random stream (``SeedSequence([seed, 1, chunk])``) and
compressed on its own (the manifest names the compressor: the same one gives the same
bytes). Pure numpy and the standard library; no Spark.

The generator, one concern a module: ``shape`` (what the dump looks like: the measured
shares, properties, core items, classes, word lists, hostile lines), ``basics`` (draws,
literals, the ``Plan`` type), ``plan`` (the plan drawn from the seed), ``render`` (a chunk's
N-Triples), ``sqldumps`` (the enwiki SQL dumps), ``generate`` (worker processes, files,
manifest), ``measure`` (the distributions of a real or generated dump) and ``command``
(``python -m refactx_testing.dumpgen``). This package exports what tests and
benchmarks use.
"""

from refactx_testing.dumpgen.command import main
from refactx_testing.dumpgen.floor import compression_floor, whole_subjects
from refactx_testing.dumpgen.generate import generate, last_run
from refactx_testing.dumpgen.measure import measure, measure_dump, measure_nt, measure_sql
from refactx_testing.dumpgen.shape import (
    HOSTILE_LINES,
    HOT_LABEL,
    INVALID_UTF8_BYTES,
    MANIFEST_FILE,
    PAGE_FILE,
    PAGE_PROPS_FILE,
    PRESETS,
    SKEW_FACTS_PER_ITEM,
    TRUTHY_FILE,
)

__all__ = [
    "HOSTILE_LINES",
    "HOT_LABEL",
    "INVALID_UTF8_BYTES",
    "MANIFEST_FILE",
    "PAGE_FILE",
    "PAGE_PROPS_FILE",
    "PRESETS",
    "SKEW_FACTS_PER_ITEM",
    "TRUTHY_FILE",
    "compression_floor",
    "generate",
    "last_run",
    "main",
    "measure",
    "measure_dump",
    "measure_nt",
    "measure_sql",
    "whole_subjects",
]
