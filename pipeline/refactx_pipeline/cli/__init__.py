"""The ``refactx-pipeline`` command (``commands``: the arguments and the commands; ``progress``: the
build's progress display; ``failures``: a failure as one line; ``vocabulary``: the examples'
BPE vocabulary; ``renamed``: the one line the ``refactx-index`` script prints); ``python -m
refactx_pipeline.cli`` runs the command too.

Layer 6 (docs/architecture.md), the top: nothing in the package imports it.
"""
