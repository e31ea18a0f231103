"""A made-up financial ownership graph, generated deterministically (the worked example of a
corporate graph build; README "Corporate graphs").

Companies, people, cities and ownership stakes; predicates ``owns``, ``controls`` (a stake
over 50 %), ``subsidiary_of`` (the controlled company's side), ``director_of``,
``headquartered_in``, ``incorporated_on``, ``date_of_birth``, and per stake ``stake_holder``,
``stake_in``, ``share_percentage`` and ``acquired_on``: about 10,000 triples as CSV files
(``triples.csv``, ``labels.csv``, ``predicate_labels.csv``) and a config (``graph.toml``)
with the inverse labels (``owned by``, ``controlled by``, ``has subsidiary``,
``has director``...). A few company and person names repeat on purpose: the label rule
qualifies them with their description. The word lists are package data
(``financial-words.json``, beside this module).

    python -m refactx_testing.finance_example OUT_DIR [--seed 7] [--turtle]

``--turtle`` also writes the same graph as Turtle (``graph.ttl``, ``graph-turtle.toml``).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from importlib.resources import files
from pathlib import Path

PREDICATES = {
    "owns": "owns",
    "controls": "controls",
    "subsidiary_of": "subsidiary of",
    "director_of": "director of",
    "headquartered_in": "headquartered in",
    "incorporated_on": "incorporated on",
    "date_of_birth": "date of birth",
    "stake_holder": "stake holder",
    "stake_in": "stake in",
    "share_percentage": "share percentage",
    "acquired_on": "acquired on",
}
INVERSE_LABELS = {
    "owns": "owned by",
    "controls": "controlled by",
    "subsidiary_of": "has subsidiary",
    "director_of": "has director",
    "stake_holder": "holds stake",
    "stake_in": "has stake",
}
COMPANIES = 700
PEOPLE = 450
REPEATED_NAMES = 12  # company and person names given twice, to exercise the label rule


def _words() -> dict[str, list[str]]:
    return json.loads((files("refactx_testing") / "financial-words.json").read_text("utf-8"))


def _date(rng: random.Random, first: int, last: int) -> str:
    return f"{rng.randint(first, last)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def generate(seed: int = 7, companies: int = COMPANIES, people: int = PEOPLE
             ) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str, str]]]:
    """(triples (subject, predicate, object, datatype), labels (id, label, description)); the
    defaults give about 10,000 triples, fewer companies and people a smaller graph."""
    n_companies, n_people = companies, people
    rng = random.Random(seed)
    words = _words()
    triples: list[tuple[str, str, str, str]] = []
    labels: list[tuple[str, str, str]] = []
    cities = [f"C{i:03d}" for i in range(len(words["cities"]))]
    for cid, name in zip(cities, words["cities"]):
        labels.append((cid, name, "city"))
    names = [f"{a} {b} {c}" for a in words["company_first"] for b in words["company_second"]
             for c in words["company_forms"]]
    company_names = rng.sample(names, n_companies - REPEATED_NAMES)
    company_names += rng.sample(company_names, REPEATED_NAMES)
    companies = [f"CO{i:04d}" for i in range(n_companies)]
    for cid, name in zip(companies, company_names):
        kind = rng.choice(words["company_kinds"])
        city = rng.randrange(len(cities))
        labels.append((cid, name, f"{kind} in {words['cities'][city]}"))
        triples.append((cid, "headquartered_in", cities[city], ""))
        triples.append((cid, "incorporated_on", _date(rng, 1950, 2022), "date"))
    person_names = rng.sample([f"{a} {b}" for a in words["given_names"] for b in words["surnames"]],
                              n_people - REPEATED_NAMES)
    person_names += rng.sample(person_names, REPEATED_NAMES)
    people = [f"PE{i:04d}" for i in range(n_people)]
    for pid, name in zip(people, person_names):
        born = _date(rng, 1940, 1995)
        labels.append((pid, name, f"person born {born[:4]}"))
        triples.append((pid, "date_of_birth", born, "date"))
    # ownership: each company but the first few roots has 1-3 owners among earlier companies
    # and people; a stake records the share and the date
    stake = 0
    for i, cid in enumerate(companies):
        if i < 20:
            continue
        remaining = 100.0
        for _ in range(rng.randint(1, 3)):
            owner = rng.choice(companies[:i]) if rng.random() < 0.75 else rng.choice(people)
            share = round(rng.uniform(5, min(remaining, 90)), 1) if remaining > 5 else 0
            if share <= 0:
                break
            remaining -= share
            sid = f"ST{stake:05d}"
            stake += 1
            owner_name = company_names[companies.index(owner)] if owner.startswith("CO") else \
                person_names[people.index(owner)]
            labels.append((sid, f"stake {sid[2:]} of {owner_name} in {company_names[i]}", "ownership stake"))
            triples += [(owner, "owns", cid, ""), (sid, "stake_holder", owner, ""), (sid, "stake_in", cid, ""),
                        (sid, "share_percentage", f"{share}", "decimal"),
                        (sid, "acquired_on", _date(rng, 1990, 2025), "date")]
            if share > 50:
                triples += [(owner, "controls", cid, "")]
                if owner.startswith("CO"):
                    triples.append((cid, "subsidiary_of", owner, ""))
    for cid in companies:
        for pid in rng.sample(people, rng.randint(1, 4)):
            triples.append((pid, "director_of", cid, ""))
    return triples, labels


def write_example(out_dir: str | Path, seed: int = 7, companies: int = COMPANIES, people: int = PEOPLE) -> Path:
    """Write the example's CSV files and ``graph.toml`` into ``out_dir``; return the config path."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    triples, labels = generate(seed, companies, people)
    with open(out / "triples.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["subject", "predicate", "object", "datatype"])
        writer.writerows(triples)
    with open(out / "labels.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "label", "description"])
        writer.writerows(labels)
    with open(out / "predicate_labels.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "label"])
        writer.writerows(PREDICATES.items())
    inverse = ", ".join(f"{k} = {json.dumps(v)}" for k, v in INVERSE_LABELS.items())
    config = out / "graph.toml"
    config.write_text(
        "# the made-up financial graph of refactx_testing.finance_example\n"
        "[paths]\n"
        f"build_root = {json.dumps(str(out / 'build'))}\n"
        'source = "finance"\n'
        'dump_date = "example"\n\n'
        "[graph]\n"
        'format = "csv"\n'
        f"triples = [{json.dumps(str(out / 'triples.csv'))}]\n"
        f"labels = {json.dumps(str(out / 'labels.csv'))}\n"
        f"predicate_labels = {json.dumps(str(out / 'predicate_labels.csv'))}\n\n"
        "[verbalize]\n"
        "inverse = true\n"
        f"inverse_labels = {{ {inverse} }}\n\n"
        "[tree]\n"
        "subtree_threshold = 64\n",
        encoding="utf-8",
    )
    return config


def _turtle_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


TURTLE_NAMESPACE = "urn:finance:"
_XSD = {"date": "xsd:date", "decimal": "xsd:decimal"}


def write_turtle(path: str | Path, seed: int = 7, companies: int = COMPANIES, people: int = PEOPLE) -> Path:
    """The same graph as one Turtle file (ids ``urn:finance:<id>``, so ``graph.namespace =
    "urn:finance:"`` gives the CSV's ids back): each subject's triples in one block with ``;``
    and ``,`` lists, labels as ``rdfs:label``, descriptions as ``schema:description``."""
    triples, labels = generate(seed, companies, people)
    by_subject: dict[str, dict[str, list[str]]] = {}
    for s, p, o, datatype in triples:
        obj = f"f:{o}" if not datatype else f"{_turtle_literal(o)}^^{_XSD[datatype]}"
        by_subject.setdefault(s, {}).setdefault(f"f:{p}", []).append(obj)
    for ident, label, description in labels:
        entry = by_subject.setdefault(ident, {})
        entry.setdefault("rdfs:label", []).append(_turtle_literal(label))
        if description:
            entry.setdefault("schema:description", []).append(_turtle_literal(description))
    for ident, label in PREDICATES.items():
        by_subject.setdefault(ident, {}).setdefault("rdfs:label", []).append(_turtle_literal(label))
    lines = [f"@prefix f: <{TURTLE_NAMESPACE}> .", "@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .",
             "@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .", "@prefix schema: <http://schema.org/> .", ""]
    for subject, predicates in by_subject.items():
        body = " ;\n    ".join(f"{p} {', '.join(objects)}" for p, objects in predicates.items())
        lines.append(f"f:{subject} {body} .")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m refactx_testing.finance_example", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="where triples.csv, labels.csv, predicate_labels.csv and graph.toml go")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--turtle", action="store_true",
                        help="also write the same graph as graph.ttl and its config graph-turtle.toml")
    args = parser.parse_args(argv)
    config = write_example(args.out_dir, args.seed)
    sys.stdout.write(f"{config}\n")
    if args.turtle:
        ttl = write_turtle(config.parent / "graph.ttl", args.seed)
        text = config.read_text(encoding="utf-8")
        graph = text[text.index("[graph]"):text.index("[verbalize]")]
        turtle = config.with_name("graph-turtle.toml")
        turtle.write_text(text.replace(graph, "[graph]\n" 'format = "turtle"\n'
                                       f"triples = [{json.dumps(str(ttl))}]\n"
                                       f'namespace = "{TURTLE_NAMESPACE}"\n\n'), encoding="utf-8")
        sys.stdout.write(f"{turtle}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
