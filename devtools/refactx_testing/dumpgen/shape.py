"""What the generated dump looks like: file names, the distributions and shares measured on the
real extracts, the core properties and items, the item classes, the word lists and the hostile
lines.
"""

from __future__ import annotations

from dataclasses import dataclass


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
# lines, 890 million facts). "dense" (the default): rdf:type only and few other
# languages, about 0.33 facts per line (13M lines with a 1M-fact hot prefix: ~5M facts).
LINE_MIXES = {
    #         metadata lines per item, mean other languages with a label, share of those with a description
    "dense": (1, 0.4, 0.5),
    "real": (10, 9.0, 0.8),
}

# Presets: what the texts are drawn from (independent of the line mix; the plan is the same).
# "dense" (the default, the generator's first texts): ~200 title words, ~100 given and ~200
# family names. "realistic": the same lists at the head of Zipf distributions over 80,000
# title words and 6,000 + 60,000 names (lexicon.py), and shorter titles, so a larger dump
# keeps meeting new words. Measured (bench/bench_realism.py, docs/scale.md "The realistic
# preset"): its facts' zstd floor of texts is within 6% of dense's at 3.8k-245k facts (of
# token ids 7-16% above: its generated words take 2-3 tokens), and both
# are above the real sample's at 3.8k facts (that sample is mostly country-to-country
# facts): the floor is set by the facts' structure more than by the vocabulary.
PRESETS = {
    "dense": "small word lists (~200 title words, ~300 names)",
    "realistic": "80,000 title words and 66,000 names behind the same lists; shorter titles",
    "wikidata": "realistic's words; most items with few statements, labels sharing their first "
                "word, homonyms told apart by description",
    "wikidata-stressed": "wikidata's items; every class's labels a shared first word, then a word "
                         "drawn evenly from tens of thousands: many small rows under the plain cut",
}
# the presets whose items have few statements (WIKIDATA_BODY_SCALE) and wikidata's labels
WIKIDATA_PRESETS = ("wikidata", "wikidata-stressed")
# the presets that draw their texts from the lexicon's large word lists (lexicon.py)
LEXICON_PRESETS = ("realistic", *WIKIDATA_PRESETS)

# The "wikidata" preset: the subjects and labels of real Wikidata, whose tree is the hard one
# to store (many rare subjects below each shared first word, each a few facts). Measured on
# ../shared/data/wikidata/truthy-2018-sample500-en.nt (a random sample of items): statements per
# item median 3, mean 10, p90 32; English label median 8 characters, description median 38.
# Statements per item: each class's lognormal median scaled down, its spread widened (the same
# long tail, a median of a few statements).
WIKIDATA_BODY_SCALE = 0.15
WIKIDATA_BODY_SIGMA = 0.5  # added to each class's sigma
# human labels: a given name drawn Zipf from the head of the given names (the shared first
# word: "John ...", "Maria ..."), then a family name: this share from the common ones (Zipf
# over the real list: "John Smith" is many people, told apart by description), the others
# uniform over tens of thousands
WIKIDATA_GIVEN_HEAD = 100
WIKIDATA_COMMON_FAMILY_SHARE = 0.5
# homonyms: this share of the labelled items of a class take the label of another item of
# their class (Zipf by popularity): the labels stage tells them apart by description, or by id
WIKIDATA_HOMONYM_SHARE = 0.2

# The "wikidata-stressed" preset: the wikidata preset's items, labelled as real Wikidata's are
# under its shared first words. Real labels' first words are shared by hundreds to thousands
# of subjects (100M items) and their second words spread over a vocabulary, so below an
# expanded first word most children are one subject of a few facts: an unseen Wikidata-shaped
# dump of 2.67M facts cut (plain) into 0.075 rows a fact, 75% of them of at most 10 facts,
# median row body 186 bytes (issue 54). The wikidata preset shares first words among humans
# only (a tenth of the items), and half its family names are Zipf over a few common ones, so
# its rows hold tens of facts. Here humans are labelled a first word, then a family name drawn
# evenly from the 60,000 (2,658 distinct first Qwen2.5 tokens); the classes below a first word,
# then a word drawn evenly from the family names and the title words (6,489 distinct first
# tokens), then (STRESSED_KEEPS_TITLE) the rest of their title. The first words: given names for humans,
# title words for the others, Zipf over as many as make STRESSED_SUBJECTS_PER_FIRST_WORD
# subjects each on average in the whole dump, so that the shape holds at any dump size
# (a fixed list would be shared by few subjects in a small dump and by too many in a large one).
STRESSED_SUBJECTS_PER_FIRST_WORD = 400
STRESSED_FIRST_WORD_ZIPF = 0.5
STRESSED_CLASSES = ("article", "misc", "place", "work")
STRESSED_KEEPS_TITLE = ("article", "work")

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
