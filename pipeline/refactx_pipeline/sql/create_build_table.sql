-- Fresh, unattached tables for one build's tree rows and provenance blocks: no index yet
-- (built after COPY). Placeholders: {schema}, {table}, {provenance_table}.
-- A block is a zstd frame already: EXTERNAL stores it out of line when large, uncompressed
-- again (pglz would spend CPU to find nothing).
CREATE TABLE {schema}.{table} (LIKE {schema}.tree);
CREATE TABLE {schema}.{provenance_table} (LIKE {schema}.provenance_blocks);
ALTER TABLE {schema}.{provenance_table} ALTER COLUMN data SET STORAGE EXTERNAL;
