"""Which dump a scheduled build takes: pure functions over a dumps root laid out as Wikimedia's.

A dumps root holds one folder per dump, named by its date (``YYYYMMDD``); a dump is complete
once its folder holds the completion marker (``input.dump_marker``, default ``_IMPORTED``,
written last by whatever copies the dump in; Hadoop and Spark skip files whose name starts with
``_`` when they list a folder). A folder without the marker is still being written and is never
taken. The build of a dump reads the files of its folder matching ``input.dump_files``.

The newest complete dump is taken only when it is newer than every dump already built: an older
dump is never built after a newer one (it would replace the served indexes with older facts).
The Airflow DAG's sensor calls :func:`choose_dump`; the function itself touches only the
filesystem it is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from refactx_index.errors import ConfigError

from refactx_pipeline.config import Config

DATE_FOLDER = re.compile(r"^[0-9]{8}$")


@dataclass(frozen=True)
class Dump:
    dump_date: str
    dumps: tuple[str, ...]  # what input.dumps becomes for the build

    def to_dict(self) -> dict[str, object]:
        return {"dump_date": self.dump_date, "dumps": list(self.dumps)}


def complete_dump_dates(root: Path, marker: str) -> list[str]:
    """The dated folders (``YYYYMMDD``) under ``root`` that hold ``marker``, oldest first."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if DATE_FOLDER.match(p.name) and p.is_dir() and (p / marker).is_file())


def newest_unbuilt(complete: Iterable[str], built: Iterable[str]) -> str | None:
    """The newest complete dump date when it is newer than every built one, else None."""
    newest = max(complete, default=None)
    if newest is None:
        return None
    newest_built = max((d for d in built if DATE_FOLDER.match(d)), default=None)
    return newest if newest_built is None or newest > newest_built else None


def dump_inputs(root: Path, dump_date: str, pattern: str) -> tuple[str, ...]:
    """``input.dumps`` for one dated folder: a glob of its dump files."""
    return (str(root / dump_date / pattern),)


def choose_dump(cfg: Config, built: Iterable[str], *, dump_date: str | None = None,
                dumps: Iterable[str] | None = None) -> Dump | None:
    """The dump a run builds, or None while there is nothing (yet) to build.

    On demand (``dump_date`` given): that date, with ``dumps`` if given, else its folder under
    ``input.dumps_root`` once complete (None until then), else the config's ``input.dumps``.
    Scheduled (no ``dump_date``): the newest complete dump under ``input.dumps_root`` that is
    newer than every ``built`` one.
    """
    inp = cfg.input
    root = Path(inp.dumps_root) if inp.dumps_root else None
    explicit = tuple(dumps or ())
    if dump_date:
        if explicit:
            return Dump(dump_date, explicit)
        if root is None:
            return Dump(dump_date, tuple(inp.dumps))
        if dump_date not in complete_dump_dates(root, inp.dump_marker):
            return None
        return Dump(dump_date, dump_inputs(root, dump_date, inp.dump_files))
    if root is None:
        raise ConfigError("input.dumps_root is not set: a scheduled build needs a dumps root "
                         "(or trigger the DAG with a dump_date)")
    found = newest_unbuilt(complete_dump_dates(root, inp.dump_marker), built)
    if found is None:
        return None
    return Dump(found, explicit or dump_inputs(root, found, inp.dump_files))
