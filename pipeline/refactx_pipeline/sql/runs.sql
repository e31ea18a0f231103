-- One row per pipeline run (the Airflow DAG's record_run task): what it built and its counts.
-- Idempotent; the schema name is substituted (default "refactx").

CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {schema}.runs (
    run_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dag_run_id   text        NOT NULL,
    source       text        NOT NULL,
    dump_date    text        NOT NULL,
    status       text        NOT NULL,   -- success: every vocabulary activated; partial; failed
    counts       jsonb       NOT NULL,   -- per stage; per vocabulary for the branch stages
    finished_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (status IN ('success', 'partial', 'failed'))
);

CREATE INDEX IF NOT EXISTS runs_source_dump_idx ON {schema}.runs (source, dump_date);
