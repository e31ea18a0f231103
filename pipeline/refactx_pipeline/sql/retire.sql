-- Drop one build's tree and provenance rows (retention, or leftovers of a killed load).
-- Never the active build. Placeholders: {schema}, {table}, {provenance_table}, {build_id}.
-- Each DETACH only if that table is attached (the loader knows); a build's provenance table is
-- a partition of provenance (layout 'rows') or of provenance_blocks (layout 'blocks').
ALTER TABLE {schema}.tree DETACH PARTITION {schema}.{table};
DROP TABLE IF EXISTS {schema}.{table};
ALTER TABLE {schema}.provenance DETACH PARTITION {schema}.{provenance_table};
ALTER TABLE {schema}.provenance_blocks DETACH PARTITION {schema}.{provenance_table};
DROP TABLE IF EXISTS {schema}.{provenance_table};
UPDATE {schema}.builds SET dropped_at = now() WHERE build_id = {build_id};
