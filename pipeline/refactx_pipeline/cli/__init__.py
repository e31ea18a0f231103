"""The ``refactx-index`` command (``commands``: the arguments and the commands; ``progress``: the
build's progress display; ``failures``: a failure as one line; ``vocabulary``: the examples'
BPE vocabulary); ``python -m refactx_pipeline.cli`` runs it too.

Layer 6 (docs/architecture.md), the top: nothing in the package imports it.
"""
