-- Fresh, unattached tables for one build's tree rows and provenance rows: no index yet
-- (built after COPY). Placeholders: {schema}, {table}, {provenance_table}.
CREATE TABLE {schema}.{table} (LIKE {schema}.tree);
CREATE TABLE {schema}.{provenance_table} (LIKE {schema}.provenance);
