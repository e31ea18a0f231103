-- A fresh, unattached table for one build's rows: no index yet (built after COPY).
-- Placeholders: {schema}, {table}.
CREATE TABLE {schema}.{table} (LIKE {schema}.tree);
