-- After the provenance COPY: a B-tree on fact_id (runtime lookups: fact_id = ANY(...)), then
-- the partition's CHECK and ATTACH, like attach.sql for the tree.
-- Placeholders: {schema}, {table}, {index}, {check}, {build_id}.
-- Run in this order; statements 1-2 outside the attach transaction, 3-4 inside it.
CREATE INDEX {index} ON {schema}.{table} (fact_id);
ANALYZE {schema}.{table};
ALTER TABLE {schema}.{table} ADD CONSTRAINT {check} CHECK (build_id = {build_id});
ALTER TABLE {schema}.provenance ATTACH PARTITION {schema}.{table} FOR VALUES IN ({build_id});
