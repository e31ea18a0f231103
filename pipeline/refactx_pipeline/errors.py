"""The errors the pipeline raises, all under the runtime's ``RefactxError``.

One module, so a caller (the CLI, an Airflow task, a test) catches exactly the outcome it
cares about, and the CLI can turn each into one line saying what to do:

- ``ConfigError`` (the runtime's): the configuration or the command line is wrong.
- ``PipelineError``: the base of what only the pipeline raises.
- ``StageInputMissing``: a stage's input (an earlier stage's output) is not there; the message
  names the stage to run first.
- ``RunConflict``: another run of the same dump date holds its work directory.
- ``LoadError`` / ``ValidationFailed``: loading a build, or validating it, failed; the served
  index is untouched.
- ``ActivationRefused``: a validated build was not activated (the shrink guard, or a role
  that reads the served build could not read it); the served build is untouched and the
  index name is free. Also a ``LoadError``.

The runtime's errors module keeps only what the runtime raises; ``ConfigError`` and the base
``RefactxError`` are the runtime's, so one ``except RefactxError`` catches both packages' errors.
"""

from __future__ import annotations

from refactx_index.errors import ConfigError, RefactxError

__all__ = [
    "ActivationRefused",
    "ConfigError",
    "LoadError",
    "PipelineError",
    "RefactxError",
    "RunConflict",
    "StageInputMissing",
    "ValidationFailed",
]


class PipelineError(RefactxError):
    """Base class of the errors only the pipeline raises."""


class StageInputMissing(PipelineError, FileNotFoundError):
    """A stage's input, an earlier stage's output, is missing: run ``needs`` first. Also a
    ``FileNotFoundError``, so code that catches a missing file catches it."""

    def __init__(self, stage: str, needs: str, path: object) -> None:
        super().__init__(f"stage {stage} reads {path}, which is not there: run stage {needs} first "
                         f"(refactx-pipeline build --stages {needs},{stage})")
        self.stage, self.needs, self.path = stage, needs, path


class RunConflict(PipelineError):
    """Another run of the same dump date holds its work directory."""


class LoadError(PipelineError):
    """Loading a build into PostgreSQL failed; the served index is untouched."""


class ValidationFailed(LoadError):
    """A loaded build failed validation and was not activated."""


class ActivationRefused(LoadError):
    """A validated build was refused at activation; the served build still serves and the
    build's claim on the index name is released, so the next build of the name goes ahead."""
