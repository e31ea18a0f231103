"""What the Airflow DAGs need beside the stages: which dump (``dumps``) or export (``exports``) a
run takes, the run history (``history``) and the bodies of the DAGs' Python tasks
(``dagtasks``). Nothing here imports Airflow.

Layer 5 (docs/architecture.md): imports every layer below it, nothing above.
"""
