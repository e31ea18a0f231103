"""How stages run: the stage table and the selection rule (``table``, no stage code), each stage
bound to its module's ``run`` and ``build``, the one function that runs one or all of them
(``pipeline``), and the claim on a dump date's work directory (``workdir``).

Layer 4 (docs/architecture.md): imports every layer below it, nothing above.
"""
