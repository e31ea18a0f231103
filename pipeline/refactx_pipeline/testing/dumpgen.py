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

Distributions (docs/scale.md, "The dump generator"; ``python -m refactx_pipeline.testing.dumpgen
--measure`` prints them from ../shared's real extracts, and from a generated dump with
``--measure --dump DIR``): a mix of item classes (scholarly articles, humans, taxa, ...)
each with its statements per item (a lognormal body and, for articles, a Pareto tail of
``cites work`` up to thousands), external ids the largest share of statements, hot
objects (``human``, ``scholarly article``, ``male``, ``English``... millions of
statements point to a handful of items at full scale), hot label prefixes (article
titles starting "Crystal structure of", "Effect of", ...), label and description lengths,
sitelink coverage, and a few hostile lines of each kind the parse stage must quarantine.

``skew_facts`` adds articles whose labels all start with ``HOT_LABEL`` until at least that
many facts lie below that one prefix (issue 14's skew benchmark).

Determinism: the same ``seed``, ``lines``, ``skew_facts``, ``line_mix`` and
``chunk_lines`` give byte-identical files, whatever the number of worker processes: a
plan of every item (class, id, counts) is computed from the seed alone, then each chunk
of items is rendered from its own random stream (``SeedSequence([seed, 1, chunk])``) and
compressed on its own (the manifest names the compressor: the same one gives the same
bytes). Pure numpy and the standard library; no Spark.
"""

from __future__ import annotations

import argparse
import bz2
import collections
import gzip
import io
import json
import logging
import math
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

log = logging.getLogger(__name__)

GENERATOR_VERSION = 1
DUMP_DATE = "20240401"
TRUTHY_FILE = f"wikidata-{DUMP_DATE}-truthy-BETA.nt.bz2"
PAGE_FILE = f"enwiki-{DUMP_DATE}-page.sql.gz"
PAGE_PROPS_FILE = f"enwiki-{DUMP_DATE}-page_props.sql.gz"
MANIFEST_FILE = "manifest.json"

DEFAULT_CHUNK_LINES = 200_000  # one bz2 stream and one task per chunk (~25 MB of text)
SQL_LINE_BYTES = 1_000_000  # mysqldump's extended INSERT lines: about 1 MB each
HOT_LABEL = "Crystal structure of"  # the skewed prefix (skew_facts)

ENTITY = "http://www.wikidata.org/entity/"
DIRECT = "http://www.wikidata.org/prop/direct/"
NORMALIZED = "http://www.wikidata.org/prop/direct-normalized/"
WIKIBASE = "http://wikiba.se/ontology#"
XSD = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
RDFS_LABEL = "<http://www.w3.org/2000/01/rdf-schema#label>"
PREF_LABEL = "<http://www.w3.org/2004/02/skos/core#prefLabel>"
SCHEMA_NAME = "<http://schema.org/name>"
DESCRIPTION = "<http://schema.org/description>"
ALT_LABEL = "<http://www.w3.org/2004/02/skos/core#altLabel>"
ENTITY_DATA = "https://www.wikidata.org/wiki/Special:EntityData/"

# ====================================================================== measured constants
# Measured from ../shared/data by ``measure()`` (``--measure`` prints them; docs/scale.md
# has the table). The extracts are small and lean to famous items (9 countries in the 2018
# head, Douglas Adams in the 2024 file), so where they cannot speak for the whole dump the
# target below says so and gives its source.

# statements per item, the 2024 file (Q42, a scholarly article, another article): 300, 106, 35
# and the 2018 head (9 countries): median 152, max 406. Whole Wikidata (published, mid-2024):
# 1.57 billion statements over ~110 million items, a mean of ~14. Body: lognormal per class
# (median, sigma below); articles add a Pareto tail of "cites work".
CITES_PARETO_ALPHA = 1.25  # P(n > x) ~ x^-alpha: at 40M articles, thousands cite > 1000 works
CITES_MAX = 5000
LONG_CITE_LIST = 200  # longer lists of cited works are drawn without repeats
CITING_SHARE = 0.4  # articles with any "cites work" statement (WikiCite covers part of them)
GIANTS_PER_MILLION_LINES = 1.0  # articles given 1,000-4,000 citations (at least one per dump)

# Datatypes: external ids are 51% of the 2024 file's statements (the items' own
# wikiba:identifiers counts: 54%; Q42 alone 234 of 307), 17% of the 2018 head's (9
# countries: item-valued 45%, quantities 18%). The class mix below gives about ExternalId
# 42%, WikibaseItem 35%, String 12%, Time 4%, Monolingualtext 3%, Quantity 2%; coordinates,
# URLs and media under 1% each (``--measure --dump`` prints it for a generated dump).
NORMALIZED_SHARE = 0.27  # external ids with a direct-normalized line too (2018 head 0.35, 2024 file 0.14)

# English label and description lengths (characters), sample500 items: labels median 8,
# p90 18; descriptions median 38, p90 75. Articles (the 2024 file) are longer: titles of
# 20-46 characters there, 30-130 here. The generated ones come from word lists.

# Sitelink coverage. The enwiki page head (2015): of 8,370 main-namespace pages, 2,001 are
# redirects; page_props gives 8,968 wikibase_item rows. Whole Wikidata: ~6.8M English
# articles for ~110M items, 6%; the per-class shares below average about that.
REDIRECTS_PER_ARTICLE = 0.31  # page head: 2,001 redirects / 6,369 articles in namespace 0
TALK_PAGES_PER_ARTICLE = 0.17  # page head: 1,058 talk pages (namespace 1) / 6,369 articles
PROJECT_PAGES_PER_ARTICLE = 0.02  # page head: namespaces 2-5 and 12: 133 / 6,369
UNCONNECTED_ARTICLE_SHARE = 0.03  # articles without a wikibase_item row (page head vs page_props)
SHORTDESC_SHARE = 0.85  # articles with wikibase-shortdesc (2024 enwiki; absent from the 2015 head)
PAGE_IMAGE_SHARE = 0.53  # page_props head: 6,785 page_image / 8,968 wikibase_item
DEFAULTSORT_SHARE = 0.9  # of people's articles (page_props head: 4,586 defaultsort / 8,968 wikibase_item, mostly people)
LOST_SITELINK_SHARE = 0.001  # wikibase_item rows whose page is missing from the page dump

# Hostile lines: one of each malformed kind per HOSTILE_EVERY_LINES lines (at least one set),
# plus valid lines the parse stage skips: unknown values and no-value types.
HOSTILE_EVERY_LINES = 1_000_000
UNKNOWN_VALUE_SHARE = 0.002  # statements whose value is "unknown" (a genid IRI)
NO_VALUE_SHARE = 0.001  # items with an rdf:type .../prop/novalue/P... line

# Line mixes. "real": the 2024 per-entity metadata (9 Special:EntityData lines + rdf:type)
# and terms in many languages: about 0.12 facts per line, like the full dump (7.5 billion
# lines, 890 million facts: issue 14). "dense" (the default): rdf:type only and few other
# languages, about 0.33 facts per line (13M lines with a 1M-fact hot prefix: ~5M facts).
LINE_MIXES = {
    #         metadata lines per item, mean other languages with a label, share of those with a description
    "dense": (1, 0.4, 0.5),
    "real": (10, 9.0, 0.8),
}

# ====================================================================== vocabulary
DATATYPES_KEPT = ("WikibaseItem", "String", "Quantity", "Time", "GlobeCoordinate", "Monolingualtext")


@dataclass(frozen=True)
class Prop:
    pid: int
    datatype: str
    label: str
    description: str
    normalized: str = ""  # IRI prefix of its direct-normalized lines (external ids)


def _props(rows: str) -> list[Prop]:
    out = []
    for row in rows.strip().splitlines():
        pid, dtype, label, desc, *norm = [c.strip() for c in row.split("|")]
        out.append(Prop(int(pid), dtype, label, desc, norm[0] if norm else ""))
    return out


# pid | datatype | English label | description | direct-normalized IRI prefix
CORE_PROPS = _props("""
31 | WikibaseItem | instance of | that class of which this subject is a particular example and member
279 | WikibaseItem | subclass of | this item is a subclass of that item
21 | WikibaseItem | sex or gender | sex or gender identity of human or animal
27 | WikibaseItem | country of citizenship | the object is a country that recognizes the subject as its citizen
17 | WikibaseItem | country | sovereign state that this item is in
131 | WikibaseItem | located in the administrative territorial entity | the item is located on the territory of the following administrative entity
19 | WikibaseItem | place of birth | most specific known birth location of a person
20 | WikibaseItem | place of death | most specific known location of death
106 | WikibaseItem | occupation | occupation of a person
69 | WikibaseItem | educated at | educational institution attended by subject
108 | WikibaseItem | employer | person or organization for which the subject works or worked
735 | WikibaseItem | given name | first name or another given name of this person
734 | WikibaseItem | family name | part of full name of person
1412 | WikibaseItem | languages spoken, written or signed | language(s) that a person or a people speaks, writes or signs
103 | WikibaseItem | native language | language or languages a person has learned from early childhood
569 | Time | date of birth | date on which the subject was born
570 | Time | date of death | date on which the subject died
577 | Time | publication date | date or point in time when a work was first published or released
571 | Time | inception | time when an entity begins to exist
50 | WikibaseItem | author | main creator(s) of a written work
2093 | String | author name string | stores unspecified author or editor name for publications
1476 | Monolingualtext | title | published name of a work
1433 | WikibaseItem | published in | larger work that a given work was published in
478 | String | volume | volume of a book or music release in a collection/series or a published collection of journal issues
433 | String | issue | issue of a newspaper, a scientific journal or magazine
304 | String | page(s) | page number of source referenced for statement
2860 | WikibaseItem | cites work | citation from one creative or scholarly work to another
921 | WikibaseItem | main subject | primary topic of a work
407 | WikibaseItem | language of work or name | language associated with this creative work
356 | ExternalId | DOI | serial code used to uniquely identify digital objects like academic papers | http://dx.doi.org/
698 | ExternalId | PubMed ID | identifier for journal articles/abstracts in PubMed | http://identifiers.org/pubmed/
932 | ExternalId | PMCID | identifier for a scientific work issued by PubMed Central | http://identifiers.org/pmc/
10283 | ExternalId | OpenAlex ID | identifier for works, authors, institutions, venues, concepts, publishers in OpenAlex | https://openalex.org/
4011 | ExternalId | Semantic Scholar paper ID | identifier for an article in the Semantic Scholar database
8608 | ExternalId | Fatcat ID | identifier on fatcat.wiki, a repository of scholarly articles maintained by the Internet Archive
6366 | ExternalId | Microsoft Academic ID | identifier for an object or topic in the Microsoft Academic Graph
236 | ExternalId | ISSN | International Standard Serial Number | https://issn.org/resource/ISSN/
225 | String | taxon name | correct scientific name of a taxon
105 | WikibaseItem | taxon rank | level in a taxonomic hierarchy
171 | WikibaseItem | parent taxon | closest parent taxon of the taxon in question
846 | ExternalId | GBIF taxon ID | taxon identifier in GBIF | https://www.gbif.org/species/
685 | ExternalId | NCBI taxonomy ID | identifier for a taxon in the Taxonomy Database by the National Center for Biotechnology Information | http://purl.obolibrary.org/obo/NCBITaxon_
830 | ExternalId | Encyclopedia of Life ID | identifier of a taxon in the Encyclopedia of Life
625 | GlobeCoordinate | coordinate location | geocoordinates of the subject
1082 | Quantity | population | number of people inhabiting the place
2044 | Quantity | elevation above sea level | height of the item above sea level
2046 | Quantity | area | area occupied by an object
281 | String | postal code | identifier assigned by postal authorities for the subject area
1566 | ExternalId | GeoNames ID | identifier in the GeoNames geographical database | http://sws.geonames.org/
214 | ExternalId | VIAF ID | identifier for the Virtual International Authority File database | http://viaf.org/viaf/
227 | ExternalId | GND ID | identifier from an international authority file of names, subjects, and organizations | https://d-nb.info/gnd/
244 | ExternalId | Library of Congress authority ID | Library of Congress name authority | http://id.loc.gov/authorities/names/
213 | ExternalId | ISNI | International Standard Name Identifier for an identity
496 | ExternalId | ORCID iD | identifier for a person | https://orcid.org/
646 | ExternalId | Freebase ID | identifier for a page in the Freebase database | http://g.co/kg
2671 | ExternalId | Google Knowledge Graph ID | identifier for Google Knowledge Graph API | http://g.co/kg
1053 | ExternalId | ResearcherID | identifier for a researcher in a system for scientific authors
373 | String | Commons category | name of the Wikimedia Commons category containing files related to this item
18 | CommonsMedia | image | image of relevant illustration of the subject
856 | Url | official website | URL of the official page of an item
703 | WikibaseItem | found in taxon | the taxon in which the item can be found
351 | ExternalId | Entrez Gene ID | identifier for a gene per the NCBI Entrez database | http://purl.uniprot.org/geneid/
594 | ExternalId | Ensembl gene ID | identifier for a gene as per the Ensembl database | http://identifiers.org/ensembl/
352 | ExternalId | UniProt protein ID | identifier for a protein per the UniProt database | http://purl.uniprot.org/uniprot/
59 | WikibaseItem | constellation | the area of the celestial sphere of which the subject is a part
6257 | Quantity | right ascension | astronomical equivalent of longitude
6258 | Quantity | declination | astronomical equivalent of latitude
1215 | Quantity | apparent magnitude | measurement of the brightness of an astronomic object
528 | String | catalog code | catalog name of an object
136 | WikibaseItem | genre | creative work's genre or an artist's field of work
495 | WikibaseItem | country of origin | country of origin of this item
57 | WikibaseItem | director | director(s) of film, TV-series, stageplay, video game or similar
161 | WikibaseItem | cast member | actor in the subject production
175 | WikibaseItem | performer | actor, musician, band or other performer associated with this role or musical work
170 | WikibaseItem | creator | maker of this creative work or other object
301 | WikibaseItem | category's main topic | primary topic of the subject Wikimedia category
910 | WikibaseItem | topic's main category | main Wikimedia category
1448 | Monolingualtext | official name | official name of the subject in its official language(s)
1705 | Monolingualtext | native label | label for the items in their official language
530 | WikibaseItem | diplomatic relation | diplomatic relations of the country
47 | WikibaseItem | shares border with | countries or administrative subdivisions, of equal level, that this item borders
150 | WikibaseItem | contains the administrative territorial entity | direct subdivisions of an administrative territorial entity
527 | WikibaseItem | has part(s) | part of this subject
361 | WikibaseItem | part of | object of which the subject is a part
1343 | WikibaseItem | described by source | work where this item is described
1889 | WikibaseItem | different from | item that is different from another item, with which it may be confused
5008 | WikibaseItem | on focus list of Wikimedia project | property to indicate that an item is of particular interest for a Wikimedia project
2888 | Url | exact match | URL used to link two items or properties that are in different datasets
1813 | Monolingualtext | short name | short name of a place, organisation, person, journal, Wikidata property, etc.
""")

# The long tail of properties: external ids from hundreds of catalogues (most Wikidata
# properties are external ids: 2,142 of the 4,472 English property labels in sample500 say
# "ID" or "identifier", 2018; about three quarters today) and a few of other types.
TAIL_PROPERTIES = 600  # at full size; small dumps get fewer (tail_properties)


def tail_properties(lines: int) -> int:
    """Long-tail properties of a dump of ``lines`` lines: a small dump's head stays small."""
    return int(min(TAIL_PROPERTIES, max(40, lines // 2000)))

TAIL_DATATYPES = (("ExternalId", 0.86), ("String", 0.05), ("Quantity", 0.04), ("WikibaseItem", 0.03),
                  ("Time", 0.015), ("Url", 0.005))

# Core items: the hot objects and the classes, with their real ids and English labels.
# qid | pool | weight | label | description | enwiki title ("" when none)
CORE_ITEMS_TABLE = """
5 | class:human | 1 | human | common name of Homo sapiens, unique extant species of the genus Homo | Human
13442814 | class:article | 1 | scholarly article | article in an academic publication, usually peer reviewed |
16521 | class:taxon | 1 | taxon | group of one or more organism(s), which a taxonomist adjudges to be a unit | Taxon
4167836 | class:category | 1 | Wikimedia category | use with 'instance of' (P31) for Wikimedia category |
4167410 | class:disambiguation | 1 | Wikimedia disambiguation page | navigational page used by Wikimedia projects |
7187 | class:gene | 1 | gene | basic physical and functional unit of heredity | Gene
8054 | class:gene | 1 | protein | biomolecule consisting of chains of amino acid residues | Protein
523 | class:astro | 5 | star | astronomical object consisting of a luminous spheroid of plasma | Star
318 | class:astro | 3 | galaxy | astronomical structure that contains stars | Galaxy
3863 | class:astro | 2 | asteroid | minor planet that is not a comet | Asteroid
532 | class:place | 6 | village | small clustered human settlement smaller than a town | Village
486972 | class:place | 3 | human settlement | community of any size, in which people live | Human settlement
515 | class:place | 1 | city | large and permanent human settlement | City
11424 | class:work | 3 | film | sequence of images that give the impression of movement | Film
482994 | class:work | 3 | album | grouping of album tracks, physical and/or digital | Album
7725634 | class:work | 2 | literary work | creative work of literature | Literary work
3305213 | class:work | 2 | painting | artwork produced with paint | Painting
5633421 | class:journal | 1 | scientific journal | academic journal dedicated to disseminating scientific research | Scientific journal
43229 | class:misc | 3 | organization | social entity established to meet needs or pursue goals | Organization
79007 | class:misc | 2 | street | public thoroughfare in a built environment | Street
101352 | class:misc | 2 | family name | part of a naming scheme for individuals | Surname
12308941 | class:misc | 2 | male given name | given name usually meaning a male person | Given name
41176 | class:misc | 1 | building | structure, typically with a roof and walls | Building
6581097 | sex | 78 | male | to be used in "sex or gender" (P21) to indicate that the human subject is a male | Male
6581072 | sex | 21 | female | to be used in "sex or gender" (P21) to indicate that the human subject is a female | Female
1052281 | sex | 1 | trans woman | female person who was assigned male at birth | Trans woman
30 | country | 20 | United States of America | country primarily located in North America | United States
145 | country | 7 | United Kingdom | country in north-west Europe | United Kingdom
183 | country | 7 | Germany | country in Central Europe | Germany
142 | country | 6 | France | country in Western Europe | France
17 | country | 6 | Japan | island country in East Asia | Japan
148 | country | 6 | People's Republic of China | country in East Asia | China
38 | country | 4 | Italy | country in Southern Europe | Italy
29 | country | 4 | Spain | country in southwestern Europe | Spain
159 | country | 4 | Russia | country in Eastern Europe and Northern Asia | Russia
16 | country | 4 | Canada | country in North America | Canada
668 | country | 4 | India | country in South Asia | India
155 | country | 3 | Brazil | country in South America | Brazil
36 | country | 3 | Poland | country in Central Europe | Poland
408 | country | 3 | Australia | country in the Southern Hemisphere | Australia
55 | country | 2 | Kingdom of the Netherlands | sovereign state and constitutional monarchy | Kingdom of the Netherlands
34 | country | 2 | Sweden | country in Northern Europe | Sweden
40 | country | 2 | Austria | country in Central Europe | Austria
39 | country | 2 | Switzerland | federal republic in Central Europe | Switzerland
96 | country | 2 | Mexico | country in North America | Mexico
884 | country | 2 | South Korea | country in East Asia | South Korea
1650915 | occupation | 30 | researcher | person who conducts research | Researcher
82955 | occupation | 10 | politician | person involved in politics | Politician
937857 | occupation | 10 | association football player | team sport athlete | Association football player
33999 | occupation | 8 | actor | person who acts in a dramatic or comic production | Actor
36180 | occupation | 7 | writer | person who uses written words to communicate ideas | Writer
177220 | occupation | 5 | singer | person who sings | Singer
1028181 | occupation | 4 | painter | person who creates paintings | Painter
39631 | occupation | 4 | physician | professional who practices medicine | Physician
40348 | occupation | 3 | lawyer | legal professional who practices law | Lawyer
1622272 | occupation | 3 | university teacher | person teaching at a university | University teacher
1860 | language | 85 | English | West Germanic language | English language
188 | language | 4 | German | West Germanic language | German language
150 | language | 4 | French | Romance language | French language
1321 | language | 3 | Spanish | Romance language | Spanish language
7737 | language | 2 | Russian | East Slavic language | Russian language
5287 | language | 2 | Japanese | East Asian language | Japanese language
7432 | rank | 80 | species | one of the basic units of biological classification | Species
34740 | rank | 12 | genus | taxonomic rank above species | Genus
35409 | rank | 5 | family | taxonomic rank above genus | Family (biology)
68947 | rank | 3 | subspecies | taxonomic rank subordinate to species | Subspecies
15978631 | organism | 55 | Homo sapiens | species of mammal | Homo sapiens
83310 | organism | 25 | house mouse | species of mammal | House mouse
184224 | organism | 10 | brown rat | species of rodent | Brown rat
25241 | organism | 10 | Escherichia coli | species of Gram-negative bacterium | Escherichia coli
10517 | constellation | 1 | Ursa Major | constellation in the northern celestial hemisphere | Ursa Major
10476 | constellation | 1 | Virgo | constellation of the zodiac | Virgo (constellation)
10584 | constellation | 1 | Sagittarius | constellation of the zodiac | Sagittarius (constellation)
8667 | constellation | 1 | Orion | constellation on the celestial equator | Orion (constellation)
10438 | constellation | 1 | Cygnus | constellation in the northern sky | Cygnus (constellation)
9759 | genre | 3 | rock music | genre of popular music | Rock music
11399 | genre | 2 | pop music | genre of popular music | Pop music
130232 | genre | 3 | drama film | film genre | Drama (film and television)
157443 | genre | 2 | comedy film | film genre | Comedy film
12132 | topic | 3 | crystal structure | ordered arrangement of atoms, ions, or molecules in a crystalline material | Crystal structure
12136 | topic | 3 | disease | abnormal condition negatively affecting organisms | Disease
12078 | topic | 2 | cancer | group of diseases | Cancer
7020 | topic | 1 | cell | basic structural and functional unit of life forms | Cell (biology)
"""


@dataclass(frozen=True)
class CoreItem:
    qid: int
    pool: str
    weight: float
    label: str
    description: str
    title: str


CORE_ITEMS = [CoreItem(int(q), p, float(w), lab, desc, title)
              for q, p, w, lab, desc, title in
              ([c.strip() for c in row.split("|")] for row in CORE_ITEMS_TABLE.strip().splitlines())]

MONTHS = ("January February March April May June July August September October November "
          "December").split()
GIVEN = """James John Robert Michael William David Richard Joseph Thomas Charles Mary Patricia
Jennifer Linda Elizabeth Barbara Susan Jessica Sarah Karen Hans Peter Klaus Jürgen Anna Maria Marie
Jean Pierre Michel Giuseppe Giovanni Francesco José Antonio Manuel Carlos Juan Luis Ana Carmen Wei
Yan Hiroshi Takashi Yuki Olga Ivan Sergei Dmitri Anastasia Ahmed Mohamed Ali Fatima Priya Rahul Anil
Sunita Lars Erik Ingrid Sven Jan Piet Johan Karl Friedrich Heinrich Wilhelm Emma Olivia Sophia Lucas
Noah Liam Mateo Kenji Akira Paulo Pedro Rafael Laura Julia Elena Andrea Marco Luca Stefan Tomasz
Katarzyna Agnieszka Jakub Zoë Søren Björn Ólafur Nguyễn Minh Thanh Hà François Chloé""".split()
FAMILY = """Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez
Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez
Clark Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill Flores Green Adams
Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts Müller Schmidt Schneider Fischer Weber Meyer
Wagner Becker Schulz Hoffmann Dubois Durand Leroy Moreau Laurent Rossi Russo Ferrari Esposito Bianchi
Romano Colombo Fernández González Rodríguez Silva Santos Oliveira Pereira Costa Wang Li Zhang Liu Chen
Yang Huang Zhao Wu Zhou Sato Suzuki Takahashi Tanaka Watanabe Ito Yamamoto Nakamura Kobayashi Ivanov
Smirnov Kuznetsov Popov Petrov Nowak Kowalski Wiśniewski Kowalczyk Jensen Nielsen Hansen Andersson
Johansson Karlsson Nilsson Kumar Singh Sharma Patel Gupta Khan Hussain Kim Park Choi Jung Kang O'Brien
O'Connor Murphy Kelly Østergaard Çelik Yılmaz Kovačević Dvořák""".split()
NATIONALITY = {30: "American", 145: "British", 183: "German", 142: "French", 17: "Japanese",
               148: "Chinese", 38: "Italian", 29: "Spanish", 159: "Russian", 16: "Canadian",
               668: "Indian", 155: "Brazilian", 36: "Polish", 408: "Australian", 55: "Dutch",
               34: "Swedish", 40: "Austrian", 39: "Swiss", 96: "Mexican", 884: "South Korean"}
SCIENCE = """protein expression cell cells gene genes receptor cancer tumor patients clinical analysis
structure binding activity human mouse mice rat model disease acute chronic infection virus bacterial
resistance treatment therapy study cohort randomized trial risk factors association mutation mutations
sequence genome genomic transcription regulation signaling pathway inhibitor inhibitors kinase enzyme
domain complex membrane mitochondrial oxidative stress inflammation immune response lymphocytes
children adults women pregnancy diabetes obesity cardiovascular heart brain neuronal neurons cognitive
depression anxiety liver kidney lung breast prostate colorectal carcinoma lymphoma leukemia surgery
outcomes mortality survival diagnosis imaging magnetic resonance tomography ultrasound synthesis
characterization properties nanoparticles polymer crystal thin films surface temperature pressure
water soil plant plants growth climate change species population evolution phylogenetic molecular
dynamics simulation quantum spin optical laser electron density functional theory method approach
novel effects role impact influence comparison evaluation development identification detection
measurement in of the and with during after among from by for between using on its""".split()
TITLE_STARTS = ("Crystal structure of", "Effect of", "The effect of", "Synthesis and characterization of",
                "Evaluation of", "Analysis of", "Role of", "Identification of", "Characterization of",
                "Comparison of", "Association of", "Development of", "Impact of", "Prevalence of",
                "Expression of", "Influence of", "A case of", "Molecular", "Clinical", "Structure of")
TITLE_START_SHARE = 0.45  # article titles that begin with one of TITLE_STARTS (Zipf over them)
LATIN = """al an ar bo ca ce chi co da de di do fa fe fi ga ge gi la le li lo lu ma me mi mo mu na ne
ni no nu pa pe pi po pu ra re ri ro ru sa se si so su ta te ti to tu va ve vi xa za""".split()
PLACE_PARTS = """Nowa Stara Wieś Górna Dolna Berg Dorf Hausen Feld Ville Saint Santa San Mont Val
Lake River North South East West Green Oak Mill Bridge Ford Port Haven Brook""".split()
CATALOGS = ("HD", "HIP", "2MASS J", "UGC", "NGC", "PGC", "TYC", "Gaia DR3")
OTHER_LANGS = ("de", "fr", "es", "it", "nl", "pl", "sv", "pt", "ca", "ru", "uk", "ja", "zh", "ar",
               "cs", "fi", "hu", "ro", "tr", "ko", "vi", "id", "he", "fa", "da", "nb", "eo", "el")
NON_LATIN = {"ru": 0x0430, "uk": 0x0430, "ja": 0x30A2, "zh": 0x4E00, "ar": 0x0627, "ko": 0xAC00,
             "he": 0x05D0, "fa": 0x0627, "el": 0x03B1}
SCHOLARLY_DESC = {"de": "wissenschaftlicher Artikel", "fr": "article scientifique",
                  "es": "artículo científico", "it": "articolo scientifico", "nl": "wetenschappelijk artikel",
                  "pl": "artykuł naukowy", "sv": "vetenskaplig artikel", "ru": "научная статья",
                  "ca": "article científic", "pt": "artigo científico"}

# ====================================================================== item classes
# share of items | P31 pool | lognormal body (median, sigma, cap) | en label, en description,
# sitelink, short-description shares | body properties (pid, weight, object spec)
# Shares: ~38% scholarly articles (37M of 97M items, 2021 analysis of the dump), ~10% humans,
# 4% taxa, 5% categories, 2% genes/proteins, 6% astronomical objects, 5% places, 5% works,
# 1% disambiguation pages, journals, the rest other things.


@dataclass(frozen=True)
class ItemClass:
    name: str
    share: float
    body_median: float
    body_sigma: float
    body_cap: int
    en_label: float
    en_desc: float
    sitelink: float
    props: tuple[tuple[int, float, str], ...]
    fixed: tuple[tuple[int, str], ...] = ()  # (pid, object spec) every item has
    noun: str = ""  # disambiguates a duplicate Wikipedia title: "John Smith (politician)"


def _spec(rows: str) -> tuple[tuple[int, float, str], ...]:
    out = []
    for row in rows.strip().splitlines():
        pid, weight, spec = row.split()
        out.append((0 if pid == "tail" else int(pid), float(weight), spec))  # tail: the long tail
    return tuple(out)


CLASSES: tuple[ItemClass, ...] = (
    ItemClass("article", 0.375, 11.0, 0.6, 400, 0.98, 0.97, 0.0005, _spec("""
        2093 20 str:author
        50 6 ref:human
        356 9 ext:doi
        698 8 ext:pmid
        932 3 ext:pmc
        10283 12 ext:openalex
        4011 9 ext:num
        8608 5 ext:alnum
        6366 5 ext:num
        921 3 core:topic
        478 4 str:volume
        433 3 str:issue
        304 4 str:pages
        tail 6 ext:tail"""), fixed=((31, "core:class:article"), (1476, "mono:title"), (577, "time:pub"),
                                   (1433, "ref:journal"), (407, "core:language")), noun="article"),
    ItemClass("human", 0.10, 12.0, 0.9, 600, 0.95, 0.85, 0.10, _spec("""
        106 10 core:occupation
        27 6 core:country
        569 6 time:birth
        570 3 time:death
        19 4 ref:place
        20 2 ref:place
        735 4 ref:misc
        734 4 ref:misc
        1412 4 core:language
        69 2 ref:misc
        108 2 ref:misc
        214 6 ext:num
        227 4 ext:gnd
        244 4 ext:loc
        213 3 ext:isni
        496 6 ext:orcid
        646 3 ext:freebase
        2671 3 ext:freebase
        1053 2 ext:alnum
        18 1 commons
        373 1 str:commonscat
        856 0.5 url
        tail 45 ext:tail"""), fixed=((31, "core:class:human"), (21, "core:sex")), noun="person"),
    ItemClass("taxon", 0.04, 7.0, 0.6, 200, 0.90, 0.85, 0.05, _spec("""
        171 4 ref:taxon
        846 4 ext:num
        685 4 ext:num
        830 3 ext:num
        18 1 commons
        tail 12 ext:tail"""), fixed=((31, "core:class:taxon"), (105, "core:rank"), (225, "str:taxon")),
        noun="genus"),
    ItemClass("category", 0.05, 1.0, 0.5, 10, 0.95, 0.98, 0.35, _spec("""
        301 3 ref:any
        373 1 str:commonscat
        tail 0.5 ext:tail"""), fixed=((31, "core:class:category"),)),
    ItemClass("gene", 0.02, 8.0, 0.5, 120, 0.92, 0.95, 0.02, _spec("""
        351 4 ext:num
        594 4 ext:ensembl
        352 3 ext:uniprot
        361 1 ref:gene
        527 1 ref:gene
        2888 1 url
        tail 4 ext:tail"""), fixed=((31, "core:class:gene"), (703, "core:organism")), noun="gene"),
    ItemClass("astro", 0.06, 8.0, 0.4, 80, 0.92, 0.95, 0.004, _spec("""
        59 3 core:constellation
        6257 3 qty:angle
        6258 3 qty:angle
        1215 3 qty:magnitude
        528 6 str:catalog
        tail 6 ext:tail"""), fixed=((31, "core:class:astro"),), noun="star"),
    ItemClass("place", 0.05, 9.0, 0.8, 1500, 0.75, 0.80, 0.20, _spec("""
        17 4 core:country
        131 6 ref:place
        625 4 coord
        1082 4 qty:population
        2044 1 qty:elevation
        2046 1 qty:area
        281 2 str:postal
        1566 5 ext:num
        18 2 commons
        1448 1 mono:name
        47 2 ref:place
        150 1 ref:place
        tail 10 ext:tail"""), fixed=((31, "core:class:place"),), noun="place"),
    ItemClass("work", 0.05, 9.0, 0.7, 300, 0.85, 0.85, 0.15, _spec("""
        577 3 time:pub
        495 3 core:country
        136 3 core:genre
        57 2 ref:human
        161 4 ref:human
        175 2 ref:human
        170 2 ref:human
        407 2 core:language
        1476 2 mono:title
        18 1 commons
        tail 18 ext:tail"""), fixed=((31, "core:class:work"),), noun="work"),
    ItemClass("disambiguation", 0.012, 0.5, 0.5, 3, 0.97, 0.99, 0.30, _spec("""
        1889 1 ref:any"""), fixed=((31, "core:class:disambiguation"),)),
    ItemClass("journal", 0.003, 10.0, 0.5, 120, 1.0, 1.0, 0.25, _spec("""
        236 4 ext:issn
        495 2 core:country
        407 2 core:language
        1476 1 mono:title
        856 2 url
        tail 12 ext:tail"""), fixed=((31, "core:class:journal"), (571, "time:year")), noun="journal"),
    ItemClass("misc", 0.24, 5.0, 0.9, 2000, 0.80, 0.70, 0.06, _spec("""
        17 4 core:country
        131 3 ref:place
        571 2 time:year
        625 1 coord
        361 2 ref:any
        527 1 ref:any
        1343 1 ref:any
        856 1 url
        18 1 commons
        373 1 str:commonscat
        1813 1 mono:name
        1705 1 mono:native
        tail 26 ext:tail"""), fixed=((31, "core:class:misc"),), noun="topic"),
)
CLASS_INDEX = {c.name: i for i, c in enumerate(CLASSES)}
SKEW = len(CLASSES)  # the class code of the skew articles (HOT_LABEL)
SKEW_CLASS = ItemClass("skew", 0.0, 2.0, 0.5, 10, 1.0, 1.0, 0.0, _spec("""
    50 3 ref:human
    2860 2 ref:article
    356 2 ext:doi
    698 2 ext:pmid"""), fixed=((31, "core:class:article"), (1476, "mono:title"), (577, "time:pub"),
                              (407, "core:language"), (921, "core:topic"), (478, "str:volume"),
                              (433, "str:issue"), (304, "str:pages"), (2093, "str:author"),
                              (2093, "str:author"), (2093, "str:author")))
# each skew article gives at least this many facts: its description + every fixed statement
# (all kept datatypes, objects always labelled)
SKEW_FACTS_PER_ITEM = 1 + len(SKEW_CLASS.fixed)
ALL_CLASSES = CLASSES + (SKEW_CLASS,)

# ====================================================================== hostile lines
# one of each per HOSTILE_EVERY_LINES lines: reason the parse stage gives -> a line
# ({s} is a real subject IRI of the dump)
HOSTILE_LINES: dict[str, str] = {
    "missing_final_dot": "{s} <" + DIRECT + "P31> <" + ENTITY + "Q5>",
    "too_few_terms": "{s} <" + DIRECT + "P31>",
    "unterminated_literal": '{s} <' + DIRECT + 'P1476> "A title whose quote never closes@en .',
    "bad_escape": '{s} <' + DIRECT + 'P2093> "J. Sm\\ith" .',
    "unescaped_quote": '{s} ' + DESCRIPTION + ' "the "quoted" word"@en .',
    "lone_surrogate": '{s} ' + RDFS_LABEL + ' "half an emoji \\uD83D"@en .',
    "bad_language_or_datatype": '{s} <' + DIRECT + 'P1082> "+1234"^^xsd:decimal .',
    "bad_subject": "<" + ENTITY + "Q 12> <" + DIRECT + "P31> <" + ENTITY + "Q5> .",
    "bad_predicate": "{s} wdt:P31 <" + ENTITY + "Q5> .",
    "bad_object": "{s} <" + DIRECT + "P856> <http://example.org/a b> .",
    "invalid_utf8": '{s} ' + RDFS_LABEL + ' "caf\x00INVALID\x00"@en .',  # a Latin-1 byte, see render
}
INVALID_UTF8_MARK = b"\x00INVALID\x00"
INVALID_UTF8_BYTES = b"\xe9"

# ====================================================================== small helpers


def _zipf_cdf(n: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _pick_cdf(rng: np.random.Generator, cdf: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(cdf) - 1)


def _weighted(rng: np.random.Generator, weights: Sequence[float], n: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    cdf = np.cumsum(w / w.sum())
    return _pick_cdf(rng, cdf, n)


def _join(words: np.ndarray, counts: np.ndarray) -> list[str]:
    """Row i: the first counts[i] words of words[i], joined by spaces."""
    rows = words.tolist()
    return [" ".join(r[:c]) for r, c in zip(rows, counts.tolist())]


def _objects(values: Iterable[str]) -> np.ndarray:
    out = np.empty(len(values) if hasattr(values, "__len__") else 0, dtype=object)
    out[:] = list(values)
    return out


_HEX_ESCAPE = re.compile(r"\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|\\u([0-9a-f]{4})")


def nt_literal(texts: Sequence[str]) -> np.ndarray:
    """N-Triples literals in quotes, non-ASCII escaped as the dumps write it: ``\\u00E9``
    (upper-case hex), ``\\U0001F1EE`` beyond the BMP."""
    return _objects(['"' + t + '"' if t.isascii() and t.isprintable() and '"' not in t and "\\" not in t
                     else _HEX_ESCAPE.sub(_upper_hex, json.dumps(t)) for t in texts])


def _upper_hex(m: re.Match) -> str:
    if m.group(3):
        return "\\u" + m.group(3).upper()
    code = 0x10000 + ((int(m.group(1), 16) - 0xD800) << 10) + (int(m.group(2), 16) - 0xDC00)
    return f"\\U{code:08X}"


def sql_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _iri(qids: np.ndarray, prefix: str = "Q") -> np.ndarray:
    return _objects(["<" + ENTITY + prefix + s + ">" for s in map(str, qids.tolist())])


# ====================================================================== the plan


@dataclass
class Plan:
    """Every item of the dump, decided from the seed alone (cheap; each worker recomputes it)."""

    seed: int
    lines: int
    skew_facts: int
    line_mix: str
    chunk_lines: int
    cls: np.ndarray  # class code (index into ALL_CLASSES)
    qid: np.ndarray
    n_body: np.ndarray
    n_tail: np.ndarray  # articles: cites work
    en_label: np.ndarray
    en_desc: np.ndarray
    sitelinked: np.ndarray  # an English Wikipedia article (or category page) in the page dump
    shortdesc: np.ndarray
    lost_sitelink: np.ndarray  # a wikibase_item row whose page is missing from the page dump
    n_other: np.ndarray  # other languages with a label
    n_other_desc: np.ndarray
    n_alias: np.ndarray
    no_value: np.ndarray
    chunks: list[tuple[int, int]]
    hostile_at: dict[int, list[str]]  # item index -> hostile reasons written after it
    members: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def items(self) -> int:
        return len(self.qid)

    def displayable(self) -> np.ndarray:
        """Items the labels stage gives a label: a main-namespace title, else label + description."""
        titled = self.sitelinked & (self.cls != CLASS_INDEX["category"])
        return titled | (self.en_label & self.en_desc)


def _line_mix(name: str) -> tuple[int, float, float]:
    if name not in LINE_MIXES:
        raise ValueError(f"line_mix {name!r}: expected one of {', '.join(LINE_MIXES)}")
    return LINE_MIXES[name]


def _draw_items(rng: np.random.Generator, n: int, cls: np.ndarray, line_mix: str) -> dict[str, np.ndarray]:
    """Per-item counts for ``n`` items of classes ``cls``."""
    meta, other_mean, other_desc = _line_mix(line_mix)
    median = np.array([c.body_median for c in ALL_CLASSES])[cls]
    sigma = np.array([c.body_sigma for c in ALL_CLASSES])[cls]
    cap = np.array([c.body_cap for c in ALL_CLASSES])[cls]
    body = np.minimum(np.floor(median * np.exp(sigma * rng.standard_normal(n))), cap).astype(np.int32)
    is_article = cls == CLASS_INDEX["article"]
    # cites work: a third of the articles cite nothing; the rest a Pareto tail
    pareto = np.floor((1.0 - rng.random(n)) ** (-1.0 / CITES_PARETO_ALPHA) * 2.0).astype(np.int64)
    tail = np.where(is_article & (rng.random(n) < CITING_SHARE), np.minimum(pareto, CITES_MAX), 0).astype(np.int32)
    en_label = rng.random(n) < np.array([c.en_label for c in ALL_CLASSES])[cls]
    en_desc = rng.random(n) < np.array([c.en_desc for c in ALL_CLASSES])[cls]
    sitelinked = (rng.random(n) < np.array([c.sitelink for c in ALL_CLASSES])[cls]) & en_label
    shortdesc = sitelinked & (rng.random(n) < SHORTDESC_SHARE)
    n_other = rng.poisson(other_mean, n).astype(np.int16)
    n_other = np.minimum(n_other, len(OTHER_LANGS)).astype(np.int16)
    n_other_desc = rng.binomial(n_other, other_desc).astype(np.int16)
    n_alias = rng.poisson(0.3, n).astype(np.int16)
    no_value = rng.random(n) < NO_VALUE_SHARE
    return dict(n_body=body, n_tail=tail, en_label=en_label, en_desc=en_desc, sitelinked=sitelinked,
                shortdesc=shortdesc, n_other=n_other, n_other_desc=n_other_desc, n_alias=n_alias,
                no_value=no_value, meta=np.full(n, meta, dtype=np.int32))


def _expected_lines(d: dict[str, np.ndarray], cls: np.ndarray) -> np.ndarray:
    fixed = np.array([len(c.fixed) for c in ALL_CLASSES])[cls]
    ext_share = np.array([_ext_share(c) for c in ALL_CLASSES])[cls]
    lines = (d["meta"] + 3 * d["en_label"] + d["en_desc"] + 3 * d["n_other"] + d["n_other_desc"]
             + d["n_alias"] + fixed + d["n_body"] * (1.0 + ext_share * NORMALIZED_SHARE) + d["n_tail"]
             + d["no_value"])
    return lines.astype(np.float64)


def _ext_share(c: ItemClass) -> float:
    total = sum(w for _, w, _ in c.props) or 1.0
    return sum(w for _, w, spec in c.props if spec.startswith("ext:")) / total


def make_plan(lines: int, seed: int = 0, skew_facts: int = 0, line_mix: str = "dense",
              chunk_lines: int = DEFAULT_CHUNK_LINES) -> Plan:
    """The items of a dump of about ``lines`` lines (see the module docstring)."""
    if lines < 1000:
        raise ValueError(f"lines={lines}: at least 1,000")
    if chunk_lines < 10_000:
        raise ValueError(f"chunk_lines={chunk_lines}: at least 10,000")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    prelude = _prelude_lines(tail_properties(lines))
    budget = lines - prelude - len(HOSTILE_LINES) * max(1, lines // HOSTILE_EVERY_LINES)

    # the skew articles first: their count is fixed by skew_facts
    n_skew = math.ceil(skew_facts / SKEW_FACTS_PER_ITEM) if skew_facts > 0 else 0
    skew = _draw_items(rng, n_skew, np.full(n_skew, SKEW, dtype=np.int8), line_mix)
    skew["en_label"][:] = True
    skew["en_desc"][:] = True
    skew["sitelinked"][:] = False
    skew["shortdesc"][:] = False
    skew["no_value"][:] = False
    budget -= int(_expected_lines(skew, np.full(n_skew, SKEW, dtype=np.int8)).sum())
    if budget <= 0:
        raise ValueError(f"lines={lines:,} is too few for skew_facts={skew_facts:,} "
                         f"(its {n_skew:,} articles alone take more)")

    # regular items until the line budget is spent
    shares = np.array([c.share for c in CLASSES])
    mean_lines = 30.0
    parts_cls, parts, total = [], [], 0.0
    while total < budget:
        n = max(1000, int((budget - total) / mean_lines * 1.1))
        cls = _weighted(rng, shares, n).astype(np.int8)
        d = _draw_items(rng, n, cls, line_mix)
        est = _expected_lines(d, cls)
        cum = total + np.cumsum(est)
        keep = int(np.searchsorted(cum, budget, side="left")) + 1
        keep = min(keep, n)
        parts_cls.append(cls[:keep])
        parts.append({k: v[:keep] for k, v in d.items()})
        total = float(cum[keep - 1])
        mean_lines = float(est.mean())
    cls = np.concatenate(parts_cls)
    d = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    # giants: articles with thousands of citations, at least one per dump; then the last
    # items give their lines back
    # (an article cites distinct works: at most half of the dump's articles)
    max_cites = max(1, int((cls == CLASS_INDEX["article"]).sum()) // 2)
    d["n_tail"] = np.minimum(d["n_tail"], max_cites)
    articles = np.flatnonzero(cls[: len(cls) // 2] == CLASS_INDEX["article"])
    n_giants = min(len(articles), max(1, int(lines / 1e6 * GIANTS_PER_MILLION_LINES)))
    if n_giants:
        giants = rng.choice(articles, n_giants, replace=False)
        hi = max(2, min(4000, max_cites))
        d["n_tail"][giants] = rng.integers(min(1000, hi - 1), hi, n_giants)
        keep = max(len(cls) // 2, int(np.searchsorted(np.cumsum(_expected_lines(d, cls)), budget, side="right")))
        cls, d = cls[:keep], {k: v[:keep] for k, v in d.items()}

    # the skew articles go to random places among the others
    if n_skew:
        n_all = len(cls) + n_skew
        at = np.sort(rng.choice(n_all, n_skew, replace=False))
        is_skew = np.zeros(n_all, dtype=bool)
        is_skew[at] = True
        merged_cls = np.empty(n_all, dtype=np.int8)
        merged_cls[is_skew] = SKEW
        merged_cls[~is_skew] = cls
        merged = {}
        for k, v in d.items():
            m = np.empty(n_all, dtype=v.dtype)
            m[is_skew] = skew[k]
            m[~is_skew] = v
            merged[k] = m
        cls, d = merged_cls, merged

    n = len(cls)
    # ids: increasing, with gaps like deleted items; never a core item's id (gaps >= 2, +1 on a hit)
    gaps = 2 + rng.geometric(0.6, n)
    qid = 100_000 + np.cumsum(gaps)
    qid = np.where(np.isin(qid, [c.qid for c in CORE_ITEMS]), qid + 1, qid)
    # wikibase_item rows whose page is missing from the page dump (at least one)
    eligible = np.flatnonzero((~d["sitelinked"]) & d["en_label"] & (cls != SKEW))
    lost = np.zeros(n, dtype=bool)
    lost[rng.choice(eligible, min(len(eligible), max(1, int(n * LOST_SITELINK_SHARE))), replace=False)] = True

    est = _expected_lines(d, cls)
    cum = np.cumsum(est)
    bounds = np.searchsorted(cum, np.arange(chunk_lines, cum[-1], chunk_lines))
    edges = [0] + sorted(set(int(b) + 1 for b in bounds if 0 < int(b) + 1 < n)) + [n]
    chunks = list(zip(edges[:-1], edges[1:]))

    n_sets = max(1, lines // HOSTILE_EVERY_LINES)
    hostile_at: dict[int, list[str]] = {}
    for _ in range(n_sets):
        where = rng.integers(0, n, len(HOSTILE_LINES))
        for reason, item in zip(HOSTILE_LINES, where.tolist()):
            hostile_at.setdefault(int(item), []).append(reason)

    plan = Plan(seed=seed, lines=lines, skew_facts=skew_facts, line_mix=line_mix, chunk_lines=chunk_lines,
                cls=cls, qid=qid.astype(np.int64), n_body=d["n_body"], n_tail=d["n_tail"],
                en_label=d["en_label"], en_desc=d["en_desc"], sitelinked=d["sitelinked"],
                shortdesc=d["shortdesc"], lost_sitelink=lost, n_other=d["n_other"],
                n_other_desc=d["n_other_desc"], n_alias=d["n_alias"], no_value=d["no_value"],
                chunks=chunks, hostile_at=hostile_at)
    for code in range(len(ALL_CLASSES)):
        members = np.flatnonzero(cls == code)
        # popularity: a fixed shuffle, so the most cited are not simply the first
        plan.members[code] = members[rng.permutation(len(members))]
    return plan


# ====================================================================== rendering


class Lines:
    """Lines of one chunk with their sort keys: (item, group, sequence)."""

    def __init__(self) -> None:
        self.items: list[np.ndarray] = []
        self.keys: list[np.ndarray] = []
        self.texts: list[np.ndarray] = []

    def add(self, items: np.ndarray, group: int, texts: np.ndarray, seq: np.ndarray | None = None) -> None:
        if len(texts) == 0:
            return
        seq = np.zeros(len(texts), dtype=np.int64) if seq is None else seq.astype(np.int64)
        self.items.append(items.astype(np.int64))
        self.keys.append(group * 10_000_000 + seq)
        self.texts.append(texts)

    def text(self) -> str:
        items = np.concatenate(self.items)
        keys = np.concatenate(self.keys)
        texts = np.concatenate(self.texts)
        order = np.lexsort((keys, items))
        return "\n".join(texts[order].tolist()) + "\n"

    def __len__(self) -> int:
        return sum(len(t) for t in self.texts)


@dataclass
class Statements:
    """Statements of one chunk: local item index, property id, rendered object, datatype,
    the object's plan index (items among the generated ones, -1 otherwise) or core qid."""

    item: list[np.ndarray] = field(default_factory=list)
    pid: list[np.ndarray] = field(default_factory=list)
    obj: list[np.ndarray] = field(default_factory=list)
    norm: list[np.ndarray] = field(default_factory=list)  # a direct-normalized object, or ""
    dtype: list[np.ndarray] = field(default_factory=list)
    ref: list[np.ndarray] = field(default_factory=list)  # plan index of an item object, else -1
    core: list[np.ndarray] = field(default_factory=list)  # core qid of an item object, else 0
    seq: list[np.ndarray] = field(default_factory=list)
    other_lang: list[np.ndarray] = field(default_factory=list)  # a text in another language than English
    spec: list[np.ndarray] = field(default_factory=list)  # the object spec it was drawn from

    FIELDS = ("item", "pid", "obj", "dtype", "ref", "core", "norm", "seq", "other_lang", "spec")

    def add(self, item, pid, obj, dtype, ref=None, core=None, norm=None, seq=None, other_lang=None,
            spec="") -> None:
        n = len(item)
        if n == 0:
            return
        self.item.append(np.asarray(item, dtype=np.int64))
        self.pid.append(np.full(n, pid, dtype=np.int64) if np.isscalar(pid) else np.asarray(pid, dtype=np.int64))
        self.obj.append(obj)
        self.dtype.append(np.full(n, dtype, dtype=object))
        self.ref.append(np.full(n, -1, dtype=np.int64) if ref is None else ref.astype(np.int64))
        self.core.append(np.zeros(n, dtype=np.int64) if core is None else core.astype(np.int64))
        self.norm.append(np.full(n, "", dtype=object) if norm is None else norm)
        self.seq.append(np.zeros(n, dtype=np.int64) if seq is None else seq)
        self.other_lang.append(np.zeros(n, dtype=bool) if other_lang is None else other_lang)
        self.spec.append(np.full(n, spec, dtype=object))

    def concat(self) -> dict[str, np.ndarray]:
        if not self.item:
            empty = np.zeros(0, dtype=np.int64)
            return dict(item=empty, pid=empty, obj=_objects([]), dtype=_objects([]), ref=empty, core=empty,
                        norm=_objects([]), seq=empty, other_lang=np.zeros(0, dtype=bool), spec=_objects([]))
        return {k: np.concatenate(getattr(self, k)) for k in self.FIELDS}


class Vocabulary:
    """Everything derived from the constants: properties, pools, cumulative weights (cached)."""

    def __init__(self, n_tail: int = TAIL_PROPERTIES) -> None:
        self.props = {p.pid: p for p in CORE_PROPS}
        trng = np.random.default_rng(20240401)  # fixed: the same properties for every seed
        dtypes = _weighted(trng, [w for _, w in TAIL_DATATYPES], TAIL_PROPERTIES)
        pids = np.sort(trng.choice(np.arange(2000, 12000), TAIL_PROPERTIES, replace=False))
        keep = np.sort(trng.permutation(TAIL_PROPERTIES)[:n_tail])  # a smaller dump: a subset
        dtypes, pids = dtypes[keep], pids[keep]
        pids = [int(p) for p in pids if int(p) not in self.props]
        self.tail_pids: list[int] = []
        self.tail_by_type: dict[str, list[int]] = collections.defaultdict(list)
        for pid, t in zip(pids, dtypes.tolist()):
            dtype = TAIL_DATATYPES[t][0]
            name = " ".join(w.capitalize() for w in _syllable_words(trng, 1 + int(trng.integers(0, 2))))
            if dtype == "ExternalId":
                kind = ("ID", "author ID", "person ID", "species ID", "work ID", "place ID")[int(trng.integers(0, 6))]
                label, desc = f"{name} {kind}", f"identifier in the {name} database"
                norm = f"https://{name.lower().replace(' ', '')}.example.org/id/" if trng.random() < 0.4 else ""
            else:
                words = _syllable_words(trng, 2)
                label, desc, norm = " ".join(words), f"property of type {dtype}", ""
            self.props[pid] = Prop(pid, dtype, label, desc, norm)
            self.tail_pids.append(pid)
            self.tail_by_type[dtype].append(pid)
        self.tail_ext = np.array(self.tail_by_type["ExternalId"])
        self.tail_ext_cdf = _zipf_cdf(len(self.tail_ext), 1.0)
        self.tail_ext_norm = _objects([self.props[int(p)].normalized for p in self.tail_ext])
        self.tail_other = np.array([p for p in self.tail_pids if self.props[p].datatype != "ExternalId"])
        self.pools: dict[str, tuple[np.ndarray, np.ndarray, list[CoreItem]]] = {}
        for item in CORE_ITEMS:
            self.pools.setdefault(item.pool, (np.zeros(0), np.zeros(0), []))[2].append(item)
        for pool, (_, _, items) in list(self.pools.items()):
            w = np.array([i.weight for i in items])
            self.pools[pool] = (np.array([i.qid for i in items], dtype=np.int64), np.cumsum(w / w.sum()), items)
        self.core_by_qid = {c.qid: c for c in CORE_ITEMS}
        self._zipf: dict[int, np.ndarray] = {}
        self.ext_norm_fraction = _ext_norm_fraction(self)
        self.title_cdf = _zipf_cdf(len(SCIENCE), 0.6)  # title words: a flatter Zipf than names

    def zipf(self, n: int) -> np.ndarray:
        if n not in self._zipf:
            self._zipf[n] = _zipf_cdf(n, 1.05)
        return self._zipf[n]


def _syllable_words(rng: np.random.Generator, n: int) -> list[str]:
    out = []
    for _ in range(n):
        k = int(rng.integers(2, 4))
        out.append("".join(LATIN[int(i)] for i in rng.integers(0, len(LATIN), k)))
    return out


_VOCABS: dict[int, Vocabulary] = {}
_PLAN: Plan | None = None


def _vocab(n_tail: int = TAIL_PROPERTIES) -> Vocabulary:
    if n_tail not in _VOCABS:
        _VOCABS[n_tail] = Vocabulary(n_tail)
    return _VOCABS[n_tail]


def _prelude_lines(n_tail: int) -> int:
    return _prelude_text(_vocab(n_tail)).count("\n")


class ChunkRenderer:
    """Renders the items [start, end) of a plan: texts, statements, lines."""

    def __init__(self, plan: Plan, chunk: int) -> None:
        self.plan, self.chunk = plan, chunk
        self.v = _vocab(tail_properties(plan.lines))
        self.start, self.end = plan.chunks[chunk]
        self.n = self.end - self.start
        self.rng = np.random.default_rng(np.random.SeedSequence([plan.seed, 1, chunk]))
        self.idx = np.arange(self.start, self.end)
        self.cls = plan.cls[self.start:self.end]
        self.label = _objects([""] * self.n)
        self.desc = _objects([""] * self.n)
        self.pub_year = self.rng.integers(1950, 2024, self.n)
        self.pub_month = self.rng.integers(1, 13, self.n)
        self.pub_day = self.rng.integers(1, 29, self.n)
        self.country = self._core("country", self.n)
        self.p31 = np.zeros(self.n, dtype=np.int64)  # the class its texts chose (0: drawn from the pool)
        self.constellation = self._core("constellation", self.n)
        self.st = Statements()

    # ---------------------------------------------------------------- objects

    def _core(self, pool: str, n: int) -> np.ndarray:
        qids, cdf, _ = self.v.pools[pool]
        return qids[_pick_cdf(self.rng, cdf, n)]

    def _ref(self, cls_name: str, n: int) -> np.ndarray:
        """Plan indices of ``n`` items of a class, Zipf by popularity (-1 when there is none)."""
        if cls_name == "any":
            return self.rng.integers(0, self.plan.items, n) if self.plan.items else np.full(n, -1)
        code = SKEW if cls_name == "article_skew" else CLASS_INDEX[cls_name]
        members = self.plan.members[code]
        if len(members) == 0:
            return np.full(n, -1, dtype=np.int64)
        return members[_pick_cdf(self.rng, self.v.zipf(len(members)), n)]

    def objects(self, spec: str, items: np.ndarray, pid: int) -> dict[str, Any]:
        """Rendered objects of ``spec`` for local items ``items`` (one each)."""
        n, rng = len(items), self.rng
        kind, _, arg = spec.partition(":")
        if kind == "core":
            if arg.startswith("class:"):
                qids = np.where(self.p31[items] > 0, self.p31[items], self._core(arg, n))
            elif arg == "country":
                qids = self.country[items]
            elif arg == "constellation":
                qids = self.constellation[items]
            else:
                qids = self._core(arg, n)
            return dict(obj=_iri(qids), dtype="WikibaseItem", core=qids)
        if kind == "ref":
            ref = self._ref(arg, n)
            ok = ref >= 0
            ref = np.where(ok, ref, 0)
            qids = np.where(ok, self.plan.qid[ref] if len(self.plan.qid) else 0, 5)
            return dict(obj=_iri(qids), dtype="WikibaseItem", ref=np.where(ok, ref, -1),
                        core=np.where(ok, 0, 5))
        if kind == "time":
            if arg == "pub":
                y, m, d = self.pub_year[items], self.pub_month[items], self.pub_day[items]
            elif arg == "birth":
                y = rng.integers(1700, 2005, n)
                m, d = rng.integers(1, 13, n), rng.integers(1, 29, n)
            elif arg == "death":
                y = rng.integers(1750, 2024, n)
                m, d = rng.integers(1, 13, n), rng.integers(1, 29, n)
            else:  # year precision: month and day 01, as the dumps write it
                y = rng.integers(1800, 2024, n)
                m, d = np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64)
            texts = [f'"+{a:04d}-{b:02d}-{c:02d}T00:00:00Z"^^<{XSD}dateTime>'
                     for a, b, c in zip(y.tolist(), m.tolist(), d.tolist())]
            return dict(obj=_objects(texts), dtype="Time")
        if kind == "qty":
            if arg == "population":
                vals = [f"+{v}" for v in np.floor(np.exp(rng.normal(7.0, 2.0, n))).astype(np.int64).tolist()]
            elif arg == "elevation":
                vals = [f"+{v}" for v in rng.integers(0, 3000, n).tolist()]
            elif arg == "area":
                vals = [f"+{v:.2f}" for v in np.exp(rng.normal(3.0, 1.5, n)).tolist()]
            elif arg == "angle":
                vals = [f"+{v:.6f}" for v in rng.uniform(0, 360, n).tolist()]
            else:  # magnitude
                vals = [f"{v:+.2f}" for v in rng.normal(11.0, 3.0, n).tolist()]
            return dict(obj=_objects([f'"{v}"^^<{XSD}decimal>' for v in vals]), dtype="Quantity")
        if kind == "coord":
            lat, lon = rng.uniform(-60, 70, n), rng.uniform(-170, 170, n)
            texts = [f'"Point({a:.4f} {b:.4f})"^^<http://www.opengis.net/ont/geosparql#wktLiteral>'
                     for a, b in zip(lon.tolist(), lat.tolist())]
            return dict(obj=_objects(texts), dtype="GlobeCoordinate")
        if kind == "str":
            return dict(obj=nt_literal(self._strings(arg, items, n)), dtype="String")
        if kind == "mono":
            if arg == "title":
                texts, langs = self.label[items].tolist(), ["en"] * n
            else:
                texts = self.label[items].tolist()
                langs = [("en", "de", "fr", "es")[i] for i in rng.integers(0, 4, n).tolist()]
            lits = nt_literal([t or "untitled" for t in texts])
            return dict(obj=_objects([f"{t}@{lang}" for t, lang in zip(lits.tolist(), langs)]),
                        dtype="Monolingualtext", other_lang=np.array([lang != "en" for lang in langs]))
        if kind == "ext":
            values = self._ids(arg, n)
            prop = self.v.props[pid]
            norm = None
            if prop.normalized:
                has = rng.random(n) < NORMALIZED_SHARE / max(self.v.ext_norm_fraction, 1e-9)
                norm = _objects([f"<{prop.normalized}{v}>" if h else "" for v, h in zip(values, has.tolist())])
            return dict(obj=nt_literal(values), dtype="ExternalId", norm=norm)
        if kind == "url":
            words = rng.integers(0, len(FAMILY), n)
            return dict(obj=_objects([f"<https://www.{FAMILY[w].lower().replace(chr(39), '')}{i}.example.com/>"
                                      for w, i in zip(words.tolist(), rng.integers(1, 999, n).tolist())]),
                        dtype="Url")
        if kind == "commons":
            words = rng.integers(0, len(SCIENCE), n)
            return dict(obj=_objects([f"<http://commons.wikimedia.org/wiki/Special:FilePath/{SCIENCE[w]}%20{i}.jpg>"
                                      for w, i in zip(words.tolist(), rng.integers(1, 99999, n).tolist())]),
                        dtype="CommonsMedia")
        raise ValueError(f"object spec {spec!r}")

    def _strings(self, style: str, items: np.ndarray, n: int) -> list[str]:
        rng = self.rng
        if style == "author":
            g = rng.integers(0, len(GIVEN), n)
            f = rng.integers(0, len(FAMILY), n)
            return [f"{GIVEN[a]} {FAMILY[b]}" if i % 3 else f"{GIVEN[a][0]}. {FAMILY[b]}"
                    for i, (a, b) in enumerate(zip(g.tolist(), f.tolist()))]
        if style == "volume":
            return list(map(str, rng.integers(1, 120, n).tolist()))
        if style == "issue":
            return list(map(str, rng.integers(1, 13, n).tolist()))
        if style == "pages":
            first = rng.integers(1, 3000, n)
            return [f"{a}-{a + b}" for a, b in zip(first.tolist(), rng.integers(2, 30, n).tolist())]
        if style == "taxon":
            return self.label[items].tolist()
        if style == "catalog":
            cat = rng.integers(0, len(CATALOGS), n)
            return [f"{CATALOGS[c]} {v}" for c, v in zip(cat.tolist(), rng.integers(1, 999999, n).tolist())]
        if style == "postal":
            return list(map(str, rng.integers(10000, 99999, n).tolist()))
        if style == "commonscat":
            return [t or "Unnamed" for t in self.label[items].tolist()]
        raise ValueError(f"string style {style!r}")

    def _ids(self, style: str, n: int) -> list[str]:
        rng = self.rng
        num = rng.integers(1, 10**9, n).tolist()
        if style == "doi":
            return [f"10.{1000 + a % 9000}/{SCIENCE[a % len(SCIENCE)][:4].upper()}.{a}" for a in num]
        if style == "pmid" or style == "num":
            return list(map(str, num))
        if style == "openalex":
            return [f"W{a % 5_000_000_000}" for a in num]
        if style == "pmc":
            return [f"PMC{a % 10_000_000}" for a in num]
        if style == "orcid":
            return [f"0000-000{a % 3 + 1}-{a // 10000 % 10000:04d}-{a % 10000:04d}" for a in num]
        if style == "isni":
            return [f"0000 0001 {a // 10000 % 10000:04d} {a % 10000:04d}" for a in num]
        if style == "gnd":
            return [f"{a % 200_000_000}{'X' if a % 11 == 0 else a % 10}" for a in num]
        if style == "loc":
            return [f"n{80 + a % 20}0{a % 100000:05d}" for a in num]
        if style == "freebase":
            return [f"/m/0{np.base_repr(a, 36).lower()}" for a in num]
        if style == "ensembl":
            return [f"ENSG{a % 100_000_000_000:011d}" for a in num]
        if style == "uniprot":
            return [f"{'OPQ'[a % 3]}{a % 10}{np.base_repr(a % 36**3, 36):0>3}{a % 10}" for a in num]
        if style == "issn":
            return [f"{a % 10000:04d}-{a // 10000 % 10000:04d}" for a in num]
        if style == "alnum":
            return [f"{chr(65 + a % 26)}-{a % 10000:04d}-{2000 + a % 24}" for a in num]
        raise ValueError(f"id style {style!r}")

    # ---------------------------------------------------------------- texts

    def texts(self) -> None:
        """English labels and descriptions per item, by class."""
        for code, c in enumerate(ALL_CLASSES):
            at = np.flatnonzero(self.cls == code)
            if len(at):
                labels, descs = getattr(self, "_text_" + c.name)(at, len(at))
                self.label[at] = labels
                self.desc[at] = descs

    def _date_words(self, at: np.ndarray) -> list[str]:
        return [f"{d} {MONTHS[m - 1]} {y}" for y, m, d in
                zip(self.pub_year[at].tolist(), self.pub_month[at].tolist(), self.pub_day[at].tolist())]

    def _title(self, n: int, starts: bool = True) -> list[str]:
        rng = self.rng
        k = np.clip(np.round(rng.lognormal(2.0, 0.35, n)).astype(np.int64), 3, 24)
        words = np.array(SCIENCE, dtype=object)[_pick_cdf(rng, self.v.title_cdf, n * 24).reshape(n, 24)]
        body = _join(words, k)
        if not starts:
            return [b[:1].upper() + b[1:] for b in body]
        start = _pick_cdf(rng, _zipf_cdf(len(TITLE_STARTS), 1.0), n)
        use = rng.random(n) < TITLE_START_SHARE
        return [f"{TITLE_STARTS[s]} {b}" if u else b[:1].upper() + b[1:]
                for s, b, u in zip(start.tolist(), body, use.tolist())]

    def _text_article(self, at, n):
        dates = self._date_words(at)
        style = self.rng.random(n)
        fam = self.rng.integers(0, len(FAMILY), n).tolist()
        descs = [f"scientific article published on {d}" if s < 0.6 else
                 f"scholarly article by {FAMILY[f]} et al published {d}" if s < 0.75 else
                 f"scientific article published in {d.split(' ', 1)[1]}" if s < 0.9 else "scientific article"
                 for d, s, f in zip(dates, style.tolist(), fam)]
        return self._title(n), descs

    def _text_skew(self, at, n):
        # unique by construction: a gene-like symbol from the item's plan index
        idx = (self.idx[at] * 2654435761 % 2**32).tolist()
        symbols = [f"{chr(65 + i % 26)}{chr(65 + i // 26 % 26)}{chr(65 + i // 676 % 26)}{i // 17576 % 1000}"
                   for i in idx]
        bodies = self._title(n, starts=False)
        labels = [f"{HOT_LABEL} {s} {b[:1].lower()}{b[1:]}" for s, b in zip(symbols, bodies)]
        return labels, [f"scientific article published on {d}" for d in self._date_words(at)]

    def _text_human(self, at, n):
        rng = self.rng
        g = rng.integers(0, len(GIVEN), n).tolist()
        f = _pick_cdf(rng, self.v.zipf(len(FAMILY)), n).tolist()
        mid = rng.random(n) < 0.15
        labels = [f"{GIVEN[a]} {chr(65 + (a * 7 + b) % 26)}. {FAMILY[b]}" if m else f"{GIVEN[a]} {FAMILY[b]}"
                  for a, b, m in zip(g, f, mid.tolist())]
        occ = self._core("occupation", n)
        nat = [NATIONALITY.get(int(q), "") for q in self.country[at].tolist()]
        occ_label = [self.v.core_by_qid[int(q)].label for q in occ.tolist()]
        style = rng.random(n).tolist()
        years = rng.integers(1850, 2000, n).tolist()
        descs = ["researcher" if s < 0.2 else f"{a} {o}" if s < 0.8 else f"{a} {o} (born {y})"
                 for s, a, o, y in zip(style, nat, occ_label, years)]
        return labels, descs

    def _text_taxon(self, at, n):
        rng = self.rng
        genus = _pick_cdf(rng, self.v.zipf(4000), n)
        genus_names = [_latin_word(g, 3).capitalize() for g in genus.tolist()]
        species = [_latin_word(s, 3) for s in rng.integers(0, 10**6, n).tolist()]
        kinds = ("insect", "plant", "fungus", "beetle", "moth", "bird", "fish", "bacteria")
        k = _pick_cdf(rng, _zipf_cdf(len(kinds), 1.0), n).tolist()
        return [f"{a} {b}" for a, b in zip(genus_names, species)], [f"species of {kinds[i]}" for i in k]

    def _text_category(self, at, n):
        body = self._title(n, starts=False)
        return [f"Category:{b}" for b in body], ["Wikimedia category"] * n

    def _text_gene(self, at, n):
        rng = self.rng
        sym = [f"{_latin_word(i, 2).upper()}{j}" for i, j in
               zip(rng.integers(0, 10**5, n).tolist(), rng.integers(1, 30, n).tolist())]
        unchar = rng.random(n) < 0.3
        org = self._core("organism", n)
        org_label = [self.v.core_by_qid[int(q)].label for q in org.tolist()]
        self.p31[at] = np.where(unchar, 8054, 7187)
        labels = ["uncharacterized protein" if u else s for s, u in zip(sym, unchar.tolist())]
        descs = [f"microbial protein found in {o}" if u else f"protein-coding gene in the species {o}"
                 for o, u in zip(org_label, unchar.tolist())]
        return labels, descs

    def _text_astro(self, at, n):
        rng = self.rng
        cat = _pick_cdf(rng, _zipf_cdf(len(CATALOGS), 0.8), n).tolist()
        num = rng.integers(1, 10**6, n).tolist()
        labels = [f"{CATALOGS[c]}{'' if CATALOGS[c].endswith('J') else ' '}{v}" for c, v in zip(cat, num)]
        con = self.constellation[at]
        kinds = ("star", "galaxy", "asteroid")
        k = _weighted(rng, (5, 3, 2), n)
        self.p31[at] = np.array([523, 318, 3863])[k]
        descs = [f"{kinds[i]} in the constellation {self.v.core_by_qid[int(q)].label}" if i < 2 else "asteroid"
                 for i, q in zip(k.tolist(), con.tolist())]
        return labels, descs

    def _text_place(self, at, n):
        rng = self.rng
        a = rng.integers(0, len(PLACE_PARTS), n).tolist()
        b = rng.integers(0, 10**5, n).tolist()
        labels = [f"{PLACE_PARTS[x]} {_latin_word(y, 2).capitalize()}" if y % 3 else _latin_word(y, 3).capitalize()
                  for x, y in zip(a, b)]
        country = [self.v.core_by_qid[int(q)].label for q in self.country[at].tolist()]
        kinds = ("village", "human settlement", "city", "commune", "town")
        k = _pick_cdf(rng, _zipf_cdf(len(kinds), 1.0), n).tolist()
        self.p31[at] = np.array([532, 486972, 515, 486972, 486972])[k]
        return labels, [f"{kinds[i]} in {c}" for i, c in zip(k, country)]

    def _text_work(self, at, n):
        rng = self.rng
        body = self._title(n, starts=False)
        labels = [" ".join(b.split()[:1 + i % 4]).title() for i, b in enumerate(body)]
        g = rng.integers(0, len(GIVEN), n).tolist()
        f = rng.integers(0, len(FAMILY), n).tolist()
        kinds = ("film", "album", "painting", "novel")
        k = rng.integers(0, 4, n).tolist()
        self.p31[at] = np.array([11424, 482994, 3305213, 7725634])[k]
        descs = [f"{y} {kinds[i]} by {GIVEN[a]} {FAMILY[b]}" if i != 1 else f"album by {GIVEN[a]} {FAMILY[b]}"
                 for y, i, a, b in zip(self.pub_year[at].tolist(), k, g, f)]
        return labels, descs

    def _text_disambiguation(self, at, n):
        f = _pick_cdf(self.rng, self.v.zipf(len(FAMILY)), n).tolist()
        return [FAMILY[i] for i in f], ["Wikimedia disambiguation page"] * n

    def _text_journal(self, at, n):
        body = self._title(n, starts=False)
        labels = ["Journal of " + " ".join(b.split()[:2]).title() for b in body]
        return labels, ["scientific journal"] * n

    def _text_misc(self, at, n):
        rng = self.rng
        style = rng.random(n).tolist()
        fam = _pick_cdf(rng, self.v.zipf(len(FAMILY)), n).tolist()
        giv = rng.integers(0, len(GIVEN), n).tolist()
        body = self._title(n, starts=False)
        labels, descs, p31 = [], [], []
        for s, f, g, b, c in zip(style, fam, giv, body, self.country[at].tolist()):
            if s < 0.25:
                labels.append(FAMILY[f]); descs.append("family name"); p31.append(101352)
            elif s < 0.4:
                labels.append(GIVEN[g]); descs.append("male given name"); p31.append(12308941)
            elif s < 0.6:
                labels.append(f"{FAMILY[f]} Street"); descs.append(f"street in {self.v.core_by_qid[c].label}")
                p31.append(79007)
            elif s < 0.7:
                words = b.split()[:2]
                labels.append(" ".join(words).title() + " Building")
                descs.append(f"building in {self.v.core_by_qid[c].label}"); p31.append(41176)
            else:
                words = b.split()[:2 + f % 3]
                labels.append(" ".join(words).title())
                descs.append(f"organization in {self.v.core_by_qid[c].label}"); p31.append(43229)
        self.p31[at] = p31
        return labels, descs

    # ---------------------------------------------------------------- statements

    def statements(self) -> None:
        plan, rng = self.plan, self.rng
        for code, c in enumerate(ALL_CLASSES):
            at = np.flatnonzero(self.cls == code)
            if not len(at):
                continue
            seq0 = 0
            for pid, spec in c.fixed:
                self._add(at, pid, spec, np.full(len(at), seq0))
                seq0 += 1
            # body: n_body statements each, properties by weight
            nb = plan.n_body[self.start:self.end][at]
            owners = np.repeat(at, nb)
            if len(owners) and c.props:
                seqs = seq0 + _ranks(np.repeat(np.arange(len(at)), nb))
                which = _weighted(rng, [w for _, w, _ in c.props], len(owners))
                which = _single_valued_once(owners, which, c)
                for j, (pid, _, spec) in enumerate(c.props):
                    sel = which == j
                    if not sel.any():
                        continue
                    items = owners[sel]
                    if pid == 0 or spec == "ext:tail":
                        self._tail_statements(items, seqs[sel])
                        continue
                    self._add(items, pid, spec, seqs[sel])
            # articles: cites work, by popularity; a long list is a sample of distinct works
            nt = plan.n_tail[self.start:self.end][at]
            short = nt <= LONG_CITE_LIST
            cites = np.repeat(at[short], nt[short])
            if len(cites):
                self._add(cites, 2860, "ref:article", 100_000 + _ranks(cites))
            for item, k in zip(at[~short].tolist(), nt[~short].tolist()):
                members = plan.members[CLASS_INDEX["article"]]
                ref = rng.choice(members, min(k, len(members)), replace=False)
                self.st.add(np.full(len(ref), item), 2860, _iri(plan.qid[ref]), "WikibaseItem", ref=ref,
                            seq=100_000 + np.arange(len(ref)), spec="ref:article")

    def _add(self, items: np.ndarray, pid: int, spec: str, seq: np.ndarray) -> None:
        o = self.objects(spec, items, pid)
        self.st.add(items, pid, o["obj"], o["dtype"], o.get("ref"), o.get("core"), o.get("norm"), seq,
                    o.get("other_lang"), spec)

    def _distinct(self, st: dict[str, np.ndarray], rounds: int = 4) -> dict[str, np.ndarray]:
        """The statements without repeats: a truthy dump is a set of triples. An object drawn
        twice for one item and property (a hot value, a popular cited work) is drawn again, a
        few times; what still repeats is dropped."""
        for _ in range(rounds):
            repeat = np.flatnonzero(_repeats(st))
            if not len(repeat):
                return st
            keys = sorted(set(zip(st["spec"][repeat].tolist(), st["pid"][repeat].tolist())))
            for spec, pid in keys:
                at = repeat[(st["spec"][repeat] == spec) & (st["pid"][repeat] == pid)]
                o = self.objects(spec, st["item"][at], pid)
                st["obj"][at] = o["obj"]
                for name, default in (("ref", -1), ("core", 0), ("norm", ""), ("other_lang", False)):
                    value = o.get(name)
                    st[name][at] = default if value is None else value
        keep = ~_repeats(st)
        return {k: v[keep] for k, v in st.items()}

    def _tail_statements(self, items: np.ndarray, seqs: np.ndarray) -> None:
        """Statements of the long tail of properties: mostly external ids from many catalogues."""
        rng, v = self.rng, self.v
        n = len(items)
        is_ext = rng.random(n) < 0.92
        ext_items, ext_seq = items[is_ext], seqs[is_ext]
        which = _pick_cdf(rng, v.tail_ext_cdf, len(ext_items))
        values = self._ids("num", len(ext_items))
        prefix = v.tail_ext_norm[which]
        has = (rng.random(len(ext_items)) < NORMALIZED_SHARE / max(v.ext_norm_fraction, 1e-9)) & (prefix != "")
        norm = np.where(has, "<" + prefix + _objects(values) + ">", "")
        self.st.add(ext_items, v.tail_ext[which], nt_literal(values), "ExternalId", norm=norm, seq=ext_seq,
                    spec="ext:num")
        other_items, other_seq = items[~is_ext], seqs[~is_ext]
        if len(other_items) and len(v.tail_other):
            pids = v.tail_other[rng.integers(0, len(v.tail_other), len(other_items))]
            for pid in np.unique(pids).tolist():
                sel = pids == pid
                spec = {"String": "str:catalog", "Quantity": "qty:area", "WikibaseItem": "ref:any",
                        "Time": "time:year", "Url": "url"}[v.props[pid].datatype]
                self._add(other_items[sel], pid, spec, other_seq[sel])

    # ---------------------------------------------------------------- lines

    def render(self) -> tuple[bytes, dict[str, Any]]:
        plan, rng = self.plan, self.rng
        self.texts()
        self.statements()
        st = self._distinct(self.st.concat())
        sl = slice(self.start, self.end)
        subj = _iri(plan.qid[sl])
        out = Lines()
        local = np.arange(self.n)
        meta_lines = _line_mix(plan.line_mix)[0]

        # metadata and type
        if meta_lines > 1:
            data_iri = _objects([f"<{ENTITY_DATA}Q{q}>" for q in plan.qid[sl].tolist()])
            version = rng.integers(10**8, 2 * 10**9, self.n).tolist()
            n_st = np.bincount(st["item"], minlength=self.n)
            n_ext = np.bincount(st["item"][st["dtype"] == "ExternalId"], minlength=self.n)
            n_sl = np.where(plan.sitelinked[sl], rng.integers(1, 60, self.n), rng.integers(0, 2, self.n))
            days = rng.integers(0, 365, self.n).tolist()
            meta = [
                data_iri + f" {RDF_TYPE} <http://schema.org/Dataset> .",
                data_iri + " <http://schema.org/about> " + subj + " .",
                data_iri + " <http://creativecommons.org/ns#license> <http://creativecommons.org/publicdomain/zero/1.0/> .",
                data_iri + ' <http://schema.org/softwareVersion> "1.0.0" .',
                data_iri + _objects([f' <http://schema.org/version> "{v}"^^<{XSD}integer> .' for v in version]),
                data_iri + _objects([f' <http://schema.org/dateModified> "2023-{1 + d // 31:02d}-{1 + d % 28:02d}T'
                                     f'{d % 24:02d}:{d % 60:02d}:{(d * 7) % 60:02d}Z"^^<{XSD}dateTime> .' for d in days]),
                data_iri + _objects([f' <{WIKIBASE}identifiers> "{v}"^^<{XSD}integer> .' for v in n_ext.tolist()]),
                data_iri + _objects([f' <{WIKIBASE}sitelinks> "{v}"^^<{XSD}integer> .' for v in n_sl.tolist()]),
                data_iri + _objects([f' <{WIKIBASE}statements> "{v}"^^<{XSD}integer> .' for v in n_st.tolist()]),
            ]
            for j, texts in enumerate(meta):
                out.add(local, 0, texts, np.full(self.n, j))
        out.add(local, 1, subj + f" {RDF_TYPE} <{WIKIBASE}Item> .")

        # English terms
        has = plan.en_label[sl]
        lab = nt_literal(self.label[has].tolist())
        for j, pred in enumerate((RDFS_LABEL, PREF_LABEL, SCHEMA_NAME)):
            out.add(local[has], 2, subj[has] + f" {pred} " + lab + "@en .", np.full(int(has.sum()), j))
        hasd = plan.en_desc[sl]
        out.add(local[hasd], 4, subj[hasd] + f" {DESCRIPTION} " + nt_literal(self.desc[hasd].tolist()) + "@en .")
        na = plan.n_alias[sl]
        owners = np.repeat(local, na)
        if len(owners):
            alias = [_alias(t, k) for t, k in zip(self.label[owners].tolist(), _ranks(owners).tolist())]
            out.add(owners, 5, subj[owners] + f" {ALT_LABEL} " + nt_literal(alias) + "@en .", _ranks(owners))

        # other languages: label (x3) and some descriptions
        no = plan.n_other[sl].astype(np.int64)
        owners = np.repeat(local, no)
        if len(owners):
            rank = _ranks(owners)
            first = rng.integers(0, len(OTHER_LANGS), self.n)[owners]
            lang_idx = (first + rank * 7) % len(OTHER_LANGS)  # distinct per item (7 is prime to 28)
            langs = [OTHER_LANGS[i] for i in lang_idx.tolist()]
            texts = [_translate(t or "x", lang) for t, lang in zip(self.label[owners].tolist(), langs)]
            lits = nt_literal(texts)
            tagged = lits + _objects(["@" + lang + " ." for lang in langs])
            for j, pred in enumerate((RDFS_LABEL, PREF_LABEL, SCHEMA_NAME)):
                out.add(owners, 3, subj[owners] + f" {pred} " + tagged, 1 + rank * 4 + j)
            nd = plan.n_other_desc[sl].astype(np.int64)
            has_desc = rank < nd[owners]
            d_owners = owners[has_desc]
            d_langs = [lang for lang, h in zip(langs, has_desc.tolist()) if h]
            d_texts = [SCHOLARLY_DESC.get(lang, d) if c in (CLASS_INDEX["article"], SKEW) else
                       _translate(d, lang) for lang, d, c in
                       zip(d_langs, self.desc[d_owners].tolist(), self.cls[d_owners].tolist())]
            out.add(d_owners, 4, subj[d_owners] + f" {DESCRIPTION} " + nt_literal(d_texts)
                    + _objects(["@" + lang + " ." for lang in d_langs]), 1 + rank[has_desc])

        # statements (an unknown value now and then), their direct-normalized lines
        unknown = rng.random(len(st["item"])) < UNKNOWN_VALUE_SHARE
        unknown &= st["pid"] != 31
        st_obj = st["obj"].copy()
        genid = _objects([f"<http://www.wikidata.org/.well-known/genid/{h:032x}>"
                          for h in rng.integers(0, 2**62, int(unknown.sum())).tolist()])
        st_obj[unknown] = genid
        pred = _objects([f" <{DIRECT}P{p}> " for p in st["pid"].tolist()])
        out.add(st["item"], 6, subj[st["item"]] + pred + st_obj + " .", st["seq"] * 2)
        has_norm = (st["norm"] != "") & ~unknown
        if has_norm.any():
            npred = _objects([f" <{NORMALIZED}P{p}> " for p in st["pid"][has_norm].tolist()])
            out.add(st["item"][has_norm], 6, subj[st["item"][has_norm]] + npred + st["norm"][has_norm] + " .",
                    st["seq"][has_norm] * 2 + 1)
        nov = plan.no_value[sl]
        out.add(local[nov], 7, subj[nov] + f" {RDF_TYPE} <http://www.wikidata.org/prop/novalue/P570> .")

        # hostile lines after their item
        hostile: collections.Counter[str] = collections.Counter()
        for item in sorted(k for k in plan.hostile_at if self.start <= k < self.end):
            for reason in plan.hostile_at[item]:
                line = HOSTILE_LINES[reason].replace("{s}", subj[item - self.start])
                out.add(np.array([item - self.start]), 8, _objects([line]), np.array([len(hostile)]))
                hostile[reason] += 1

        text = out.text()
        data = text.encode("utf-8")
        if hostile.get("invalid_utf8"):
            data = data.replace(INVALID_UTF8_MARK, INVALID_UTF8_BYTES)

        # what the pipeline's default configuration (English, default datatypes) keeps
        disp = plan.displayable()
        kept_dtype = np.isin(st["dtype"], DATATYPES_KEPT)
        # monolingual texts in another language are skipped by the parse stage
        other_lang = st["other_lang"]
        subj_ok = disp[self.start + st["item"]]
        obj_ok = np.where(st["ref"] >= 0, disp[np.maximum(st["ref"], 0)], True)
        kept = kept_dtype & ~other_lang & ~unknown & subj_ok & obj_ok
        seen = ~unknown & ~other_lang
        by_dtype = collections.Counter(st["dtype"][~unknown].tolist())
        filtered = collections.Counter(st["dtype"][seen & ~kept_dtype].tolist())
        sitelinked = np.flatnonzero(plan.sitelinked[sl] | plan.lost_sitelink[sl])
        info = {
            "chunk": self.chunk,
            "lines": len(out),
            "bytes": len(data),
            "statements": int(seen.sum()),
            "statements_by_datatype": dict(by_dtype),
            "filtered_by_datatype": dict(filtered),
            "unknown_value": int(unknown.sum()),
            "no_value": int(nov.sum()),
            "hostile": dict(hostile),
            "kept_statements": int(kept.sum()),
            "kept_subjects": np.unique(self.start + st["item"][kept]),
            "kept_ref_objects": np.unique(st["ref"][kept & (st["ref"] >= 0)]),
            "kept_core_objects": np.unique(st["core"][kept & (st["core"] > 0)]),
            "stmts_per_item": np.bincount(st["item"][~unknown], minlength=self.n),
            "sitelink_items": self.start + sitelinked,
            "sitelink_labels": self.label[sitelinked].tolist(),
            "sitelink_descs": self.desc[sitelinked].tolist(),
        }
        return data, info


# properties an item has at most one value of (a second draw becomes a long-tail statement)
SINGLE_VALUED = frozenset({21, 569, 570, 577, 571, 625, 1082, 2044, 2046, 6257, 6258, 1215, 478, 433, 304,
                           281, 225, 105, 1476, 356, 698, 932, 10283, 4011, 8608, 6366, 59, 236, 373})


def _single_valued_once(owners: np.ndarray, which: np.ndarray, c: ItemClass) -> np.ndarray:
    """``which`` (a property index per body slot of ``owners``) with every repeat of a
    single-valued property of an item moved to the class's long tail."""
    tail = [j for j, (pid, _, spec) in enumerate(c.props) if pid == 0]
    single = np.array([pid in SINGLE_VALUED for pid, _, _ in c.props])
    if not tail or not single.any():
        return which
    order = np.lexsort((which, owners))
    o, w = owners[order], which[order]
    again = np.r_[False, (o[1:] == o[:-1]) & (w[1:] == w[:-1])] & single[w]
    which = which.copy()
    which[order[again]] = tail[0]
    return which


def _repeats(st: dict[str, np.ndarray]) -> np.ndarray:
    """Statements equal to an earlier one of the same item (same property and object)."""
    n = len(st["item"])
    repeat = np.zeros(n, dtype=bool)
    if n == 0:
        return repeat
    codes = np.unique(st["obj"], return_inverse=True)[1].reshape(-1)
    order = np.lexsort((st["seq"], codes, st["pid"], st["item"]))
    a, b, c = st["item"][order], st["pid"][order], codes[order]
    repeat[order[1:][(a[1:] == a[:-1]) & (b[1:] == b[:-1]) & (c[1:] == c[:-1])]] = True
    return repeat


def _ranks(owners: np.ndarray) -> np.ndarray:
    """0, 1, 2... within each run of equal values of a sorted-by-run array."""
    n = len(owners)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.r_[0, np.flatnonzero(owners[1:] != owners[:-1]) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.arange(n) - run_start


def _latin_word(seed: int, syllables: int) -> str:
    out, x = [], seed
    for _ in range(syllables):
        out.append(LATIN[x % len(LATIN)])
        x = x // len(LATIN) + 7 * (x % 13)
    return "".join(out)


_TRANSLIT = str.maketrans("abcdefghijklmnopqrstuvwxyz", "абцдефгхийклмнопqрстуввxыз")


def _translate(text: str, lang: str) -> str:
    """A stand-in for a label in another language: Latin-script languages mostly keep the
    English text (names and titles do), others get characters of their script."""
    base = NON_LATIN.get(lang)
    if base is None:
        return text
    if lang in ("ru", "uk"):
        return text.lower().translate(_TRANSLIT)
    h = sum(map(ord, text))
    if lang == "zh" and h % 7 == 0:  # now and then a character beyond the BMP (CJK extension B)
        return chr(0x20000 + h % 4000) + "".join(chr(base + (h * (i + 3) + ord(ch)) % 80)
                                                 for i, ch in enumerate(text[:6]) if ch != " ")
    return "".join(chr(base + (h * (i + 3) + ord(ch)) % 80) for i, ch in enumerate(text[:12]) if ch != " ")


def _alias(label: str, k: int) -> str:
    words = label.split()
    if len(words) > 2 and k == 0:
        return " ".join(w[0] for w in words if w[:1].isalpha()).upper()
    if k == 1 and len(label) % 5 == 0:  # an emoji now and then, as in real aliases (flags...)
        return label + " \U0001F3F3\uFE0F"
    return (label.lower() if k % 2 == 0 else label.upper()) or "alias"


def _ext_norm_fraction(v: Vocabulary) -> float:
    """Share of external-id statements whose property has a normalized form (weights of CLASSES)."""
    num = den = 0.0
    for c in CLASSES:
        total = sum(w for _, w, _ in c.props) or 1.0
        for pid, w, spec in c.props:
            if spec == "ext:tail":
                frac = np.mean([1.0 if v.props[int(p)].normalized else 0.0 for p in v.tail_ext])
                num += c.share * w / total * 0.92 * frac
                den += c.share * w / total * 0.92
            elif spec.startswith("ext:"):
                num += c.share * w / total * (1.0 if v.props[pid].normalized else 0.0)
                den += c.share * w / total
    return num / den if den else 1.0


# ====================================================================== prelude


# statements of the core items in the dump's head (subclass of entity: unlabelled, never a fact)
PRELUDE_STATEMENTS = sum(1 for c in CORE_ITEMS if c.pool.startswith("class:"))


def _prelude_text(v: Vocabulary) -> str:
    """The dump's head: the Dump metadata, every property entity, the core items."""
    lines = [
        f"<{WIKIBASE}Dump> <http://creativecommons.org/ns#license> <http://creativecommons.org/publicdomain/zero/1.0/> .",
        f'<{WIKIBASE}Dump> <http://schema.org/dateModified> "2024-04-01T23:00:02Z"^^<{XSD}dateTime> .',
        f'<{WIKIBASE}Dump> <http://schema.org/softwareVersion> "1.0.0" .',
        f"<{WIKIBASE}Dump> {RDF_TYPE} <http://schema.org/Dataset> .",
        f"<{WIKIBASE}Dump> {RDF_TYPE} <http://www.w3.org/2002/07/owl#Ontology> .",
        f"<{WIKIBASE}Dump> <http://www.w3.org/2002/07/owl#imports> <http://wikiba.se/ontology-1.0.owl> .",
    ]
    for pid in sorted(v.props):
        p = v.props[pid]
        s = f"<{ENTITY}P{pid}>"
        lines.append(f"{s} {RDF_TYPE} <{WIKIBASE}Property> .")
        lab, desc = nt_literal([p.label])[0], nt_literal([p.description])[0]
        lines += [f"{s} {pred} {lab}@en ." for pred in (RDFS_LABEL, PREF_LABEL, SCHEMA_NAME)]
        lines.append(f"{s} {DESCRIPTION} {desc}@en .")
        lines.append(f"{s} <{WIKIBASE}propertyType> <{WIKIBASE}{p.datatype}> .")
        lines.append(f"{s} <{WIKIBASE}directClaim> <{DIRECT}P{pid}> .")
        if p.datatype == "ExternalId":
            lines.append(f"{s} <{DIRECT}P31> <{ENTITY}Q19847637> .")  # skipped: not an item subject
    for c in CORE_ITEMS:
        s = f"<{ENTITY}Q{c.qid}>"
        lines.append(f"{s} {RDF_TYPE} <{WIKIBASE}Item> .")
        lab, desc = nt_literal([c.label])[0], nt_literal([c.description])[0]
        lines += [f"{s} {pred} {lab}@en ." for pred in (RDFS_LABEL, PREF_LABEL, SCHEMA_NAME)]
        lines.append(f"{s} {DESCRIPTION} {desc}@en .")
        if c.pool.startswith("class:"):
            lines.append(f"{s} <{DIRECT}P279> <{ENTITY}Q35120> .")  # subclass of entity (unlabelled: dropped)
    return "\n".join(lines) + "\n"


# ====================================================================== workers


# bz2 compressors, fastest first: one independent stream per chunk, one thread each (the
# chunks are the parallelism). "auto" takes the first one on PATH, else Python's bz2.
COMPRESSORS = {
    "lbzip2": ["lbzip2", "-9", "-n", "1", "-c"],
    "pbzip2": ["pbzip2", "-9", "-p1", "-c"],
    "bzip2": ["bzip2", "-9", "-c"],
    "python": [],
}


def resolve_compressor(name: str) -> str:
    if name == "auto":
        return next((c for c in ("lbzip2", "pbzip2") if shutil.which(c)), "python")
    if name not in COMPRESSORS:
        raise ValueError(f"compressor {name!r}: expected auto or one of {', '.join(COMPRESSORS)}")
    if name != "python" and not shutil.which(name):
        raise ValueError(f"compressor {name!r} is not on PATH")
    return name


def compress(data: bytes, compressor: str) -> bytes:
    """One bz2 stream of ``data`` (level 9, the dumps' own)."""
    if compressor == "python":
        return bz2.compress(data, 9)
    return subprocess.run(COMPRESSORS[compressor], input=data, stdout=subprocess.PIPE, check=True).stdout


_COMPRESSOR = "python"


def _worker_init(lines: int, seed: int, skew_facts: int, line_mix: str, chunk_lines: int, compressor: str) -> None:
    global _PLAN, _COMPRESSOR
    _PLAN = make_plan(lines, seed, skew_facts, line_mix, chunk_lines)
    _COMPRESSOR = compressor


def _render_chunk(chunk: int) -> tuple[int, bytes, dict[str, Any]]:
    assert _PLAN is not None
    cpu = time.process_time()
    data, info = ChunkRenderer(_PLAN, chunk).render()
    info["cpu_render_s"] = time.process_time() - cpu
    cpu = time.process_time()
    packed = compress(data, _COMPRESSOR)
    info["cpu_bz2_s"] = time.process_time() - cpu  # of this process: an external compressor's is not seen
    return chunk, packed, info


# ====================================================================== SQL dumps

PAGE_COLUMNS = """  `page_id` int(10) unsigned NOT NULL AUTO_INCREMENT,
  `page_namespace` int(11) NOT NULL DEFAULT 0,
  `page_title` varbinary(255) NOT NULL DEFAULT '',
  `page_is_redirect` tinyint(1) unsigned NOT NULL DEFAULT 0,
  `page_is_new` tinyint(1) unsigned NOT NULL DEFAULT 0,
  `page_random` double unsigned NOT NULL DEFAULT 0,
  `page_touched` binary(14) NOT NULL,
  `page_links_updated` varbinary(14) DEFAULT NULL,
  `page_latest` int(10) unsigned NOT NULL DEFAULT 0,
  `page_len` int(10) unsigned NOT NULL DEFAULT 0,
  `page_content_model` varbinary(32) DEFAULT NULL,
  `page_lang` varbinary(35) DEFAULT NULL,
  PRIMARY KEY (`page_id`),
  UNIQUE KEY `page_name_title` (`page_namespace`,`page_title`),
  KEY `page_random` (`page_random`),
  KEY `page_len` (`page_len`),
  KEY `page_redirect_namespace_len` (`page_is_redirect`,`page_namespace`,`page_len`)"""
PAGE_PROPS_COLUMNS = """  `pp_page` int(10) unsigned NOT NULL,
  `pp_propname` varbinary(60) NOT NULL,
  `pp_value` blob NOT NULL,
  `pp_sortkey` float DEFAULT NULL,
  PRIMARY KEY (`pp_page`,`pp_propname`),
  UNIQUE KEY `pp_propname_page` (`pp_propname`,`pp_page`),
  UNIQUE KEY `pp_propname_sortkey_page` (`pp_propname`,`pp_sortkey`,`pp_page`)"""


def _sql_head(table: str, columns: str) -> str:
    return f"""/*M!999999\\- enable the sandbox mode */ 
-- MariaDB dump 10.19  Distrib 10.6.16-MariaDB, for debian-linux-gnu (x86_64)
--
-- Host: db1206    Database: enwiki
-- ------------------------------------------------------
-- Server version	10.6.16-MariaDB-log

/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET @OLD_CHARACTER_SET_RESULTS=@@CHARACTER_SET_RESULTS */;
/*!40101 SET @OLD_COLLATION_CONNECTION=@@COLLATION_CONNECTION */;
/*!40101 SET NAMES utf8mb4 */;
/*!40103 SET @OLD_TIME_ZONE=@@TIME_ZONE */;
/*!40103 SET TIME_ZONE='+00:00' */;
/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;
/*!40014 SET @OLD_FOREIGN_KEY_CHECKS=@@FOREIGN_KEY_CHECKS, FOREIGN_KEY_CHECKS=0 */;
/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE, SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */;
/*!40111 SET @OLD_SQL_NOTES=@@SQL_NOTES, SQL_NOTES=0 */;

--
-- Table structure for table `{table}`
--

DROP TABLE IF EXISTS `{table}`;
/*!40101 SET @saved_cs_client     = @@character_set_client */;
/*!40101 SET character_set_client = utf8 */;
CREATE TABLE `{table}` (
{columns}
) ENGINE=InnoDB DEFAULT CHARSET=binary ROW_FORMAT=COMPRESSED;
/*!40101 SET character_set_client = @saved_cs_client */;

--
-- Dumping data for table `{table}`
--

/*!40000 ALTER TABLE `{table}` DISABLE KEYS */;
"""


def _sql_tail(table: str) -> str:
    return f"""/*!40000 ALTER TABLE `{table}` ENABLE KEYS */;
/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;

/*!40101 SET SQL_MODE=@OLD_SQL_MODE */;
/*!40014 SET FOREIGN_KEY_CHECKS=@OLD_FOREIGN_KEY_CHECKS */;
/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */;
/*!40101 SET CHARACTER_SET_CLIENT=@OLD_CHARACTER_SET_CLIENT */;
/*!40101 SET CHARACTER_SET_RESULTS=@OLD_CHARACTER_SET_RESULTS */;
/*!40101 SET COLLATION_CONNECTION=@OLD_COLLATION_CONNECTION */;
/*!40111 SET SQL_NOTES=@OLD_SQL_NOTES */;

-- Dump completed on 2024-04-02  9:12:43
"""


def _write_sql(path: Path, table: str, columns: str, rows: Iterable[str]) -> int:
    """A gzip'd mysqldump of ``rows`` (each ``(v1,v2,...)``) in ~1 MB INSERT lines."""
    prefix = f"INSERT INTO `{table}` VALUES "
    n = 0
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6,
                                                mtime=0) as gz:
        out = io.TextIOWrapper(gz, encoding="utf-8", newline="\n")
        out.write(_sql_head(table, columns))
        batch: list[str] = []
        size = 0
        for row in rows:
            batch.append(row)
            size += len(row) + 1
            n += 1
            if size >= SQL_LINE_BYTES:
                out.write(prefix + ",".join(batch) + ";\n")
                batch, size = [], 0
        if batch:
            out.write(prefix + ",".join(batch) + ";\n")
        out.write(_sql_tail(table))
        out.flush()
        out.detach()
    return n


def _unique_titles(titles: list[str], nouns: list[str]) -> list[str]:
    """Wikipedia titles are unique: a repeated one gets its class noun, then a number."""
    arr = np.array(titles, dtype=object)
    order = np.argsort(arr, kind="stable")
    ranks = np.empty(len(arr), dtype=np.int64)
    ranks[order] = _ranks(arr[order]) if len(arr) else ranks
    out = [t if r == 0 else f"{t} ({nouns[i]})" if r == 1 else f"{t} ({nouns[i]} {r})"
           for i, (t, r) in enumerate(zip(titles, ranks.tolist()))]
    seen: set[str] = set()
    for i, t in enumerate(out):  # a generated "X (noun)" may meet a real one: number it
        k = 2
        while t in seen:
            t = f"{out[i]} {k}"
            k += 1
        seen.add(t)
        out[i] = t
    return out


def write_sql_dumps(out_dir: Path, plan: Plan, v: Vocabulary, sitelinks: dict[str, Any],
                    seed: int) -> dict[str, Any]:
    """The enwiki page and page_props dumps for the plan's sitelinked items."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    items = sitelinks["items"]
    labels = sitelinks["labels"]
    descs = sitelinks["descs"]
    lost = plan.lost_sitelink[items]
    cat = plan.cls[items] == CLASS_INDEX["category"]
    # core items with an English article are sitelinked too
    core_titled = [c for c in CORE_ITEMS if c.title]
    titles = [lab.removeprefix("Category:") if c else lab for lab, c in zip(labels, cat.tolist())]
    nouns = [ALL_CLASSES[int(c)].noun or "topic" for c in plan.cls[items].tolist()]
    titles = _unique_titles([c.title for c in core_titled] + titles, ["topic"] * len(core_titled) + nouns)
    qids = [c.qid for c in core_titled] + plan.qid[items].tolist()
    namespaces = [0] * len(core_titled) + [14 if c else 0 for c in cat.tolist()]
    shortdesc = [c.description for c in core_titled] + [
        (d[:1].upper() + d[1:]) if s and d else "" for d, s in zip(descs, plan.shortdesc[items].tolist())]
    is_lost = [False] * len(core_titled) + lost.tolist()
    is_disambig = [False] * len(core_titled) + (plan.cls[items] == CLASS_INDEX["disambiguation"]).tolist()
    is_human = [False] * len(core_titled) + (plan.cls[items] == CLASS_INDEX["human"]).tolist()
    n_articles = len(titles)

    # other pages: unconnected articles, redirects, talk and project pages
    n_main = sum(1 for ns in namespaces if ns == 0)  # the ratios are per main-namespace article
    n_unconnected = int(round(n_main * UNCONNECTED_ARTICLE_SHARE))
    n_redirect = int(round(n_main * REDIRECTS_PER_ARTICLE))
    n_talk = int(round(n_main * TALK_PAGES_PER_ARTICLE))
    n_project = int(round(n_main * PROJECT_PAGES_PER_ARTICLE))
    extra_titles = [f"{t} ({k})" for t, k in zip(
        _join(np.array(SCIENCE, dtype=object)[rng.integers(0, len(SCIENCE), (n_unconnected, 3))],
              np.full(n_unconnected, 3)), range(n_unconnected))]
    main = [i for i, ns in enumerate(namespaces) if ns == 0] or [0]
    redirect_src = [main[i] for i in rng.choice(len(main), min(n_redirect, len(main)), replace=False).tolist()]
    redirect_titles = [f"{titles[i].lower() if k % 2 else titles[i].upper()}" for k, i in enumerate(redirect_src)]
    talk_src = [main[i] for i in rng.choice(len(main), min(n_talk, len(main)), replace=False).tolist()]

    pages: list[tuple[int, str, int, bool]] = []  # (ns, title, article index or -1, redirect)
    pages += [(ns, t, i, False) for i, (ns, t, gone) in enumerate(zip(namespaces, titles, is_lost)) if not gone]
    pages += [(0, t, -1, False) for t in extra_titles]
    pages += [(0, t, -1, True) for t in redirect_titles]
    pages += [(1, titles[i], -1, False) for i in sorted(set(talk_src))]
    pages += [(4 if k % 3 else 2, f"Project page {k}", -1, False) for k in range(n_project)]
    # drop repeated (namespace, title) pairs: a redirect may equal an article's title
    seen: set[tuple[int, str]] = set()
    unique_pages = []
    for p in pages:
        if (p[0], p[1]) not in seen:
            seen.add((p[0], p[1]))
            unique_pages.append(p)
    pages = unique_pages
    n_pages = len(pages)
    page_ids = np.sort(rng.choice(np.arange(10, 10 + 3 * n_pages + 1000), n_pages, replace=False))
    page_ids = page_ids[rng.permutation(n_pages)]  # ids are not in title order
    article_page = {}
    page_rows = []
    randoms = rng.random(n_pages).tolist()
    latest = rng.integers(10**8, 1.2 * 10**9, n_pages).tolist()
    lengths = rng.integers(200, 150_000, n_pages).tolist()
    touched = rng.integers(0, 10**6, n_pages).tolist()
    for k, ((ns, title, art, redirect), pid) in enumerate(zip(pages, page_ids.tolist())):
        if art >= 0:
            article_page[art] = pid
        t = title.replace(" ", "_")
        stamp = f"2024{3 + touched[k] % 2:02d}{1 + touched[k] % 28:02d}{touched[k] % 24:02d}{touched[k] % 60:02d}00"
        page_rows.append((pid, f"({pid},{ns},{sql_quote(t)},{int(redirect)},{int(k % 17 == 0)},"
                               f"{randoms[k]!r},'{stamp}','{stamp}',{latest[k]},"
                               f"{60 if redirect else lengths[k]},'wikitext',NULL)"))
    page_rows.sort()

    props: list[tuple[int, str, str]] = []
    missing_page = 10 + 3 * n_pages + 1000  # ids above every page id: not in the page dump
    for i in range(n_articles):
        if is_lost[i]:
            pid = missing_page
            missing_page += 1
        else:
            pid = article_page[i]
        props.append((pid, "wikibase_item", sql_quote(f"Q{qids[i]}") + ",NULL"))
        if shortdesc[i] and not is_lost[i] and namespaces[i] == 0:
            props.append((pid, "wikibase-shortdesc", sql_quote(shortdesc[i]) + ",NULL"))
        if is_disambig[i]:
            props.append((pid, "disambiguation", "'',NULL"))
    extras = rng.random((n_articles, 2))
    for i in range(n_articles):
        if is_lost[i]:
            continue
        pid = article_page[i]
        if extras[i, 0] < PAGE_IMAGE_SHARE:
            props.append((pid, "page_image_free", sql_quote(f"{titles[i].replace(' ', '_')[:40]}.jpg") + ",NULL"))
        if is_human[i] and extras[i, 1] < DEFAULTSORT_SHARE:
            words = titles[i].split()
            props.append((pid, "defaultsort", sql_quote(", ".join(words[::-1][:2])) + ",NULL"))
    props.sort()
    prop_rows = [f"({p},'{name}',{rest})" for p, name, rest in props]
    # one hostile row: three values instead of four (a reject with its reason, column_count)
    if prop_rows:
        at = len(prop_rows) // 2
        prop_rows.insert(at, "(1,'wikibase_item','Q1')")

    page_path, props_path = out_dir / PAGE_FILE, out_dir / PAGE_PROPS_FILE
    n_page = _write_sql(page_path, "page", PAGE_COLUMNS, (r for _, r in page_rows))
    n_props = _write_sql(props_path, "page_props", PAGE_PROPS_COLUMNS, prop_rows)
    main_ns = sum(1 for i in range(n_articles) if namespaces[i] == 0 and not is_lost[i])
    return {
        "page_rows": n_page,
        "page_props_rows": n_props,
        "sitelinks": main_ns,  # what the sitelinks stage keeps
        "sitelinks_short_description": sum(1 for i in range(n_articles)
                                           if namespaces[i] == 0 and not is_lost[i] and shortdesc[i]),
        "dropped": {k: v for k, v in (
            ("non_main_namespace", sum(1 for i in range(n_articles) if namespaces[i] != 0 and not is_lost[i])),
            ("page_not_in_page_dump", int(sum(is_lost)))) if v},
        "rejected": {"page_props:column_count": 1 if prop_rows else 0},
        "titles": {"core": len(core_titled), "items": len(items)},
    }


# ====================================================================== generate


def generate(out_dir: str | os.PathLike, lines: int, seed: int = 0, skew_facts: int = 0,
             line_mix: str = "dense", chunk_lines: int = DEFAULT_CHUNK_LINES,
             workers: int | None = None, compressor: str = "auto") -> dict[str, Any]:
    """Write a dump of about ``lines`` N-Triples lines (module docstring) into ``out_dir``;
    return the manifest (also written as ``manifest.json``, last: its presence means done).

    ``workers``: processes rendering and compressing chunks (default: the CPUs this process
    may use); the bytes do not depend on it. They are started with ``spawn`` (never a fork
    of a process holding Spark's threads), so a script calling this needs the usual
    ``if __name__ == "__main__":`` guard. ``compressor``: ``auto`` (lbzip2 or pbzip2 when on
    PATH, else Python's bz2), or one of ``COMPRESSORS``; the manifest names the one used,
    and the same compressor gives the same bytes."""
    started = time.monotonic()
    compressor = resolve_compressor(compressor)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_FILE).unlink(missing_ok=True)
    plan = make_plan(lines, seed, skew_facts, line_mix, chunk_lines)
    log.info("dumpgen: %s items (%s skew) in %d chunks for %s lines, seed %d", f"{plan.items:,}",
             f"{int((plan.cls == SKEW).sum()):,}", len(plan.chunks), f"{lines:,}", seed)
    if not workers:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, min(workers, len(plan.chunks)))

    totals: collections.Counter[str] = collections.Counter()
    cpu: collections.Counter[str] = collections.Counter()  # CPU seconds of the workers, by step
    by_dtype: collections.Counter[str] = collections.Counter()
    filtered: collections.Counter[str] = collections.Counter()
    hostile: collections.Counter[str] = collections.Counter()
    kept_subjects, kept_refs, kept_core, stmts_per_item = [], [], [], []
    sl_items, sl_labels, sl_descs = [], [], []
    vocab = _vocab(tail_properties(lines))
    prelude = _prelude_text(vocab).encode("utf-8")
    truthy = out / TRUTHY_FILE
    tmp = truthy.with_suffix(".part")
    with open(tmp, "wb") as fh:
        fh.write(compress(prelude, compressor))
        totals["lines"] += prelude.count(b"\n")
        totals["bytes"] += len(prelude)
        args = (lines, seed, skew_facts, line_mix, chunk_lines, compressor)
        if workers == 1:
            _worker_init(*args)
            results: Iterator = map(_render_chunk, range(len(plan.chunks)))
            pool = None
        else:
            ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads (Spark)
            pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init, initargs=args)
            results = pool.map(_render_chunk, range(len(plan.chunks)))
        try:
            for chunk, packed, info in results:
                fh.write(packed)
                for key in ("lines", "bytes", "statements", "unknown_value", "no_value", "kept_statements"):
                    totals[key] += info[key]
                totals["compressed"] += len(packed)
                cpu["render"] += info["cpu_render_s"]
                cpu["bz2"] += info["cpu_bz2_s"]
                by_dtype.update(info["statements_by_datatype"])
                filtered.update(info["filtered_by_datatype"])
                hostile.update(info["hostile"])
                kept_subjects.append(info["kept_subjects"])
                kept_refs.append(info["kept_ref_objects"])
                kept_core.append(info["kept_core_objects"])
                stmts_per_item.append(info["stmts_per_item"])
                sl_items.append(info["sitelink_items"])
                sl_labels += info["sitelink_labels"]
                sl_descs += info["sitelink_descs"]
                elapsed = time.monotonic() - started
                log.info("dumpgen: chunk %d/%d, %s lines so far, %.0f s (%.0f lines/s)", chunk + 1,
                         len(plan.chunks), f"{totals['lines']:,}", elapsed, totals["lines"] / max(elapsed, 1e-9))
        finally:
            if pool is not None:
                pool.shutdown()
    tmp.replace(truthy)

    sql = write_sql_dumps(out, plan, vocab, {"items": np.concatenate(sl_items), "labels": sl_labels,
                                      "descs": sl_descs}, seed)

    # expected facts: statements kept + descriptions and short descriptions of the entities they mention
    disp = plan.displayable()
    entities = np.union1d(np.concatenate(kept_subjects), np.concatenate(kept_refs)).astype(np.int64)
    core_mentioned = np.unique(np.concatenate(kept_core)).tolist()
    desc_facts = int(plan.en_desc[entities].sum()) + len(core_mentioned)
    main_titled = plan.sitelinked & (plan.cls != CLASS_INDEX["category"])
    short_facts = int((main_titled & plan.shortdesc)[entities].sum()) + sum(
        1 for q in core_mentioned if vocab.core_by_qid[q].title)
    spi = np.concatenate(stmts_per_item)
    skew_items = int((plan.cls == SKEW).sum())
    prop_types = len(vocab.props)
    manifest = {
        "generator": "refactx_pipeline.testing.dumpgen",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "lines_requested": lines,
        "skew_facts": skew_facts,
        "line_mix": line_mix,
        "chunk_lines": chunk_lines,
        "compressor": compressor,
        "truthy": TRUTHY_FILE,
        "page": PAGE_FILE,
        "page_props": PAGE_PROPS_FILE,
        "lines": totals["lines"],
        "bytes": totals["bytes"],
        "bz2_streams": len(plan.chunks) + 1,
        "items": plan.items + len(CORE_ITEMS),
        "properties": prop_types,
        "statements": totals["statements"],
        "statements_by_datatype": dict(sorted(by_dtype.items(), key=lambda kv: -kv[1])),
        "statements_per_item": _quantiles(spi),
        "hostile_lines": dict(sorted(hostile.items())),
        "skew_items": skew_items,
        "hot_label": HOT_LABEL if skew_items else "",
        "hot_label_facts_at_least": skew_items * SKEW_FACTS_PER_ITEM,
        "sql": sql,
        "expected": {  # the pipeline's default configuration (filter.languages = ["en"])
            "parse": {
                "lines_in": totals["lines"],
                "rejected_by_reason": dict(sorted(hostile.items())),
                "statements_seen": totals["statements"] + PRELUDE_STATEMENTS,
                "statements_filtered_by_reason": {f"datatype_{k}": v for k, v in sorted(filtered.items())},
                "property_types_declared": prop_types,
                "unknown_value": totals["unknown_value"],
                "no_value": totals["no_value"],
            },
            "sitelinks": {"sitelinks": sql["sitelinks"], "rejected_by_reason": sql["rejected"],
                          "dropped_by_reason": sql["dropped"]},
            "labels": {"items_displayable": int(disp.sum()) + len(CORE_ITEMS)},
            # before de-duplication of identical texts: an upper bound, close to the real count
            "facts_at_most": totals["kept_statements"] + desc_facts + short_facts,
            "statement_facts_at_most": totals["kept_statements"],
        },
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    elapsed = time.monotonic() - started
    log.info("dumpgen: %s lines (%.0f MB, %.0f MB bz2), %s items, about %s facts in %.1f s (%.0f lines/s) -> %s",
             f"{totals['lines']:,}", totals["bytes"] / 1e6, totals["compressed"] / 1e6, f"{manifest['items']:,}",
             f"{manifest['expected']['facts_at_most']:,}", elapsed, totals["lines"] / elapsed, out)
    log.info("dumpgen: CPU seconds in the workers: %.1f rendering, %.1f bz2 (%d workers)",
             cpu["render"], cpu["bz2"], workers)
    _LAST_RUN.clear()
    _LAST_RUN.update(wall_s=elapsed, cpu_render_s=cpu["render"], cpu_bz2_s=cpu["bz2"], workers=workers,
                     bytes=totals["bytes"], compressed_bytes=totals["compressed"])
    return manifest


# timings of the last generate() in this process (kept out of the manifest: it must not vary)
_LAST_RUN: dict[str, Any] = {}


def last_run() -> dict[str, Any]:
    """Wall and CPU seconds of the last ``generate`` call in this process (bench/)."""
    return dict(_LAST_RUN)


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {}
    q = np.percentile(values, [50, 90, 99, 99.9])
    return {"items": int(len(values)), "mean": round(float(values.mean()), 2), "median": float(q[0]),
            "p90": float(q[1]), "p99": float(q[2]), "p99.9": float(q[3]), "max": int(values.max()),
            "over_1000": int((values > 1000).sum())}


# ====================================================================== measure


_SQL_COLUMN = re.compile(r"^\s+`([^`]+)`\s")
_SQL_QUOTED = r"'[^'\\]*(?:\\.[^'\\]*)*'"
_SQL_ROW = re.compile(r"\(((?:" + _SQL_QUOTED + r"|[^'()])*)\)")
_SQL_VALUE = re.compile(_SQL_QUOTED + r"|[^,]+")


def _sql_value(token: str) -> str:
    if token.startswith("'"):
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


_NT_LINE = re.compile(r'^(<[^>]*>|_:\S+)\s+<([^>]*)>\s+(.*?)\s*\.\s*$')


def _open_text(path: Path):
    if path.suffix == ".bz2":
        return bz2.open(path, "rt", encoding="utf-8", errors="replace")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


_NT_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)")
_NT_SIMPLE = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(body: str) -> str:
    """A literal's text (N-Triples escapes decoded; surrogate pairs joined)."""
    if "\\" not in body:
        return body
    text = _NT_ESCAPE.sub(lambda m: chr(int(m.group(1)[1:], 16)) if len(m.group(1)) > 1
                          else _NT_SIMPLE.get(m.group(1), m.group(1)), body)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def measure_nt(paths: Sequence[Path], property_types: dict[str, str] | None = None,
               property_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Shape of truthy N-Triples files: statements per item, datatypes, term lengths, hot
    objects and label prefixes. Datatypes come from propertyType lines when the files have
    them; else from the object's shape, a plain literal being an external id when its
    property has direct-normalized lines, or its English label (``property_labels``) says
    ID or identifier, or it has no label there (a property newer than the labels: nearly
    all new properties are external ids)."""
    E = "http://www.wikidata.org/entity/"
    per_item: collections.Counter[str] = collections.Counter()
    dtypes: collections.Counter[str] = collections.Counter()
    objects: collections.Counter[str] = collections.Counter()
    declared = dict(property_types or {})
    plabels = dict(property_labels or {})
    labels: dict[str, str] = {}
    descs: dict[str, str] = {}
    item_terms: collections.Counter[str] = collections.Counter()
    item_langs: dict[str, set] = collections.defaultdict(set)
    plain_by_prop: collections.Counter[str] = collections.Counter()
    lines = normalized = 0
    normalized_props: set[str] = set()
    declared_counts: collections.Counter[str] = collections.Counter()
    statements = []
    for path in paths:
        with _open_text(Path(path)) as fh:
            for line in fh:
                lines += 1
                m = _NT_LINE.match(line)
                if not m:
                    continue
                s, p, o = m.groups()
                if p == WIKIBASE + "propertyType" and s.startswith("<" + E + "P"):
                    declared[s[len(E) + 1:-1]] = o.rsplit("#", 1)[-1].rstrip(">")
                    continue
                if p.startswith(NORMALIZED):
                    normalized += 1
                    normalized_props.add(p[len(NORMALIZED):])
                    continue
                if p in (WIKIBASE + "identifiers", WIKIBASE + "statements"):
                    declared_counts[p.rsplit("#", 1)[1]] += int(re.sub(r"\D", "", o.split("^^")[0]) or 0)
                    continue
                subject = s[len(E) + 1:-1] if s.startswith("<" + E) else ""
                lit = re.match(r'^"(.*)"(@([A-Za-z-]+)|\^\^<([^>]*)>)?$', o)
                if p in ("http://www.w3.org/2000/01/rdf-schema#label", "http://schema.org/description") and lit:
                    if subject.startswith("Q"):
                        item_terms[subject] += 1
                        item_langs[subject].add(lit.group(3))
                    if lit.group(3) == "en":
                        text = _unescape(lit.group(1))
                        if p.endswith("label"):
                            if subject.startswith("P"):
                                plabels.setdefault(subject, text)
                            labels[subject] = text
                        else:
                            descs[subject] = text
                    continue
                if not p.startswith(DIRECT) or not subject.startswith("Q"):
                    continue
                per_item[subject] += 1
                pid = p[len(DIRECT):]
                if o.startswith("<" + E + "Q"):
                    shape = "WikibaseItem"
                    objects[o[len(E) + 1:-1]] += 1
                elif o.startswith("<" + E + "P"):
                    shape = "WikibaseProperty"
                elif o.startswith("<") and "/.well-known/genid/" in o:
                    shape = "unknown value"
                elif o.startswith("<"):
                    shape = "CommonsMedia" if "Special:FilePath" in o else "Url"
                elif lit and lit.group(4):
                    shape = {XSD + "dateTime": "Time", XSD + "decimal": "Quantity",
                             "http://www.opengis.net/ont/geosparql#wktLiteral": "GlobeCoordinate"}.get(
                        lit.group(4), "other")
                elif lit and lit.group(3):
                    shape = "Monolingualtext"
                else:
                    shape = "plain"
                    plain_by_prop[pid] += 1
                statements.append((pid, shape))
    id_label = re.compile(r"\b(ID|iD|identifier)\b")
    for pid, shape in statements:
        if shape == "plain":
            if pid in declared:
                shape = declared[pid]
            elif pid in normalized_props or pid not in plabels or id_label.search(plabels[pid]):
                shape = "ExternalId"
            else:
                shape = "String"
        elif pid in declared and shape not in ("unknown value",):
            shape = declared[pid]
        dtypes[shape] += 1
    counts = np.array(sorted(per_item.values()), dtype=np.int64)
    total = sum(dtypes.values()) or 1
    item_labels = [t for k, t in labels.items() if k.startswith("Q")]
    item_descs = [t for k, t in descs.items() if k.startswith("Q")]
    first2 = collections.Counter(" ".join(t.split()[:2]) for t in item_labels if len(t.split()) > 2)
    top_objects = objects.most_common(10)
    n_obj = sum(objects.values()) or 1
    terms = np.array([len(item_langs[q]) for q in per_item], dtype=np.int64)
    return {
        "files": [Path(p).name for p in paths],
        "lines": lines,
        "items_with_statements": int(len(counts)),
        "statements": int(counts.sum()),
        "statements_per_item": _quantiles(counts),
        "datatype_share": {k: round(v / total, 4) for k, v in dtypes.most_common()},
        "datatype_counts": dict(dtypes.most_common()),
        "normalized_lines_per_external_id": round(normalized / max(dtypes.get("ExternalId", 0), 1), 3),
        # the items' own counts (2024 metadata lines wikiba:identifiers / wikiba:statements)
        "declared_identifier_share": (round(declared_counts["identifiers"] / declared_counts["statements"], 3)
                                      if declared_counts["statements"] else None),
        "label_chars": _quantiles(np.array([len(t) for t in item_labels])),
        "description_chars": _quantiles(np.array([len(t) for t in item_descs])),
        "languages_per_item": _quantiles(terms),
        "top_objects": [(q, n, round(n / n_obj, 4)) for q, n in top_objects],
        "top10_objects_share": round(sum(n for _, n in top_objects) / n_obj, 4),
        "top_label_prefixes": first2.most_common(8),
        "properties_with_id_label": sum(1 for t in plabels.values() if id_label.search(t)),
        "properties_labelled": len(plabels),
    }


def measure_sql(page: Path, page_props: Path) -> dict[str, Any]:
    """Namespaces, redirects and page_props coverage of enwiki page/page_props dumps."""
    def rows(path: Path):
        cols: list[str] = []
        with _open_text(path) as fh:
            for line in fh:
                m = _SQL_COLUMN.match(line)
                if m and not line.startswith("INSERT"):
                    cols.append(m.group(1))
                elif line.startswith("INSERT INTO"):
                    for row in _SQL_ROW.finditer(line):
                        values = [_sql_value(v) for v in _SQL_VALUE.findall(row.group(1))]
                        if len(values) == len(cols):
                            yield dict(zip(cols, values))

    pages = list(rows(page))
    props = list(rows(page_props))
    ns = collections.Counter(p["page_namespace"] for p in pages)
    articles = {p["page_id"] for p in pages if p["page_namespace"] == "0" and p.get("page_is_redirect") == "0"}
    redirects = sum(1 for p in pages if p["page_namespace"] == "0" and p.get("page_is_redirect") == "1")
    last_page = max(int(p["page_id"]) for p in pages)
    with_item = {r["pp_page"] for r in props if r["pp_propname"] == "wikibase_item"}
    propnames = collections.Counter(r["pp_propname"] for r in props)
    covered = sum(1 for a in articles if a in with_item)
    return {
        "page_rows": len(pages),
        "namespaces": dict(ns.most_common()),
        "articles": len(articles),
        "redirects_per_article": round(redirects / max(len(articles), 1), 3),
        "talk_pages_per_article": round(ns.get("1", 0) / max(len(articles), 1), 3),
        "articles_with_wikibase_item": round(covered / max(len(articles), 1), 3),
        "page_props_rows": len(props),
        "page_props_in_page_range": sum(1 for r in props if int(r["pp_page"]) <= last_page),
        "propnames": dict(propnames.most_common(8)),
        "title_chars": _quantiles(np.array([len(p["page_title"]) for p in pages if p["page_id"] in articles])),
    }


def measure(shared_data: str | os.PathLike) -> dict[str, Any]:
    """The distributions the generator's constants come from, measured on ../shared/data."""
    data = Path(shared_data)
    wd = data / "wikidata"
    sample = wd / "truthy-2018-sample500-en.nt"
    plabels: dict[str, str] = {}
    if sample.exists():  # English labels of all 4,472 properties (2018)
        plabels = {k: v for k, v in _en_labels(sample).items() if k.startswith("P")}
    out: dict[str, Any] = {}
    for name in ("truthy-2018-head10k.nt", "truthy-2018-sample500-en.nt", "truthy-2024-Q42-Q37599471-Q24628793.nt"):
        path = wd / name
        if path.exists():
            out[name] = measure_nt([path], property_labels=plabels)
    full = [wd / n for n in ("truthy-2018-head10k.nt", "truthy-2024-Q42-Q37599471-Q24628793.nt") if (wd / n).exists()]
    if full:
        out["full items (2018 head + 2024 file)"] = measure_nt(full, property_labels=plabels)
    page = data / "wikipedia" / "enwiki-20150112-page.head1MiB.sql"
    props = data / "wikipedia" / "enwiki-20150112-page_props.head1MiB.sql"
    if page.exists() and props.exists():
        out["enwiki 2015 heads"] = measure_sql(page, props)
    return out


def _en_labels(path: Path) -> dict[str, str]:
    out = {}
    pat = re.compile(r'^<http://www\.wikidata\.org/entity/([QP]\d+)> <http://www\.w3\.org/2000/01/rdf-schema#label> "(.*)"@en \.$')
    with _open_text(path) as fh:
        for line in fh:
            m = pat.match(line.rstrip("\n"))
            if m:
                out[m.group(1)] = _unescape(m.group(2))
    return out


def measure_dump(dump_dir: str | os.PathLike) -> dict[str, Any]:
    """The same measures on a generated dump (its folder)."""
    d = Path(dump_dir)
    manifest = json.loads((d / MANIFEST_FILE).read_text())
    return {"truthy": measure_nt([d / manifest["truthy"]]),
            "sql": measure_sql(d / manifest["page"], d / manifest["page_props"])}


# ====================================================================== CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m refactx_pipeline.testing.dumpgen",
        description="Write a realistic, seeded Wikidata truthy dump (.nt.bz2) with matching enwiki "
                    "page/page_props SQL dumps (.sql.gz) into OUT, for benchmarks and tests; or, "
                    "with --measure, print the distributions it is modelled on.",
        epilog="Examples:\n"
               "  python -m refactx_pipeline.testing.dumpgen build/dump-1m --lines 1000000\n"
               "  python -m refactx_pipeline.testing.dumpgen build/dump-skew --lines 12000000 --skew-facts 1000000\n"
               "  python -m refactx_pipeline.testing.dumpgen --measure --shared ../shared/data\n"
               "  python -m refactx_pipeline.testing.dumpgen --measure --dump build/dump-1m\n"
               "Same seed, lines, skew, line mix, chunk size and compressor: identical bytes (any --workers).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", help="output folder (created; files in it are replaced)")
    parser.add_argument("--lines", type=int, default=1_000_000,
                        help="about this many N-Triples lines (default 1,000,000; the manifest has the exact count)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--skew-facts", type=int, default=0,
                        help=f"add articles labelled '{HOT_LABEL} ...' until at least this many facts lie "
                             "below that one label prefix (default 0: none)")
    parser.add_argument("--line-mix", choices=sorted(LINE_MIXES), default="dense",
                        help="dense (default): few skipped lines, ~0.33 facts per line; real: the full dump's "
                             "per-entity metadata and many languages, ~0.12 facts per line")
    parser.add_argument("--chunk-lines", type=int, default=DEFAULT_CHUNK_LINES,
                        help=f"lines per bz2 stream and task (default {DEFAULT_CHUNK_LINES:,}; part of the seed)")
    parser.add_argument("--workers", type=int, default=0, help="processes (default: every usable CPU)")
    parser.add_argument("--compressor", default="auto", choices=["auto", *COMPRESSORS],
                        help="bz2 compressor: auto (default) takes lbzip2 or pbzip2 when on PATH, else python")
    parser.add_argument("--measure", action="store_true",
                        help="print the measured distributions (JSON) instead of generating")
    parser.add_argument("--shared", default=str(Path.cwd().parent / "shared" / "data"),
                        help="with --measure: the real extracts (default ../shared/data)")
    parser.add_argument("--dump", help="with --measure: a generated dump's folder, measured the same way")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    if args.measure:
        result = measure_dump(args.dump) if args.dump else measure(args.shared)
        sys.stdout.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        return 0
    if not args.out:
        parser.error("OUT is required (or --measure)")
    try:
        manifest = generate(args.out, args.lines, seed=args.seed, skew_facts=args.skew_facts,
                            line_mix=args.line_mix, chunk_lines=args.chunk_lines, workers=args.workers or None,
                            compressor=args.compressor)
    except ValueError as exc:
        parser.error(str(exc))
    summary = {k: manifest[k] for k in ("lines", "items", "statements", "statements_per_item",
                                         "statements_by_datatype", "hostile_lines", "hot_label")}
    summary["facts_at_most"] = manifest["expected"]["facts_at_most"]
    sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
