"""The ``refactx-index`` command (``commands``); ``python -m refactx_pipeline.cli`` runs it too.

Layer 6 (docs/architecture.md), the top: nothing in the package imports it.
"""
