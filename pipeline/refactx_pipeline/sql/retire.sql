-- Drop one build's rows (retention, or leftovers of a killed load). Never the active build.
-- Placeholders: {schema}, {table}, {build_id}. DETACH only if attached (the loader knows).
ALTER TABLE {schema}.tree DETACH PARTITION {schema}.{table};
DROP TABLE IF EXISTS {schema}.{table};
UPDATE {schema}.builds SET dropped_at = now() WHERE build_id = {build_id};
