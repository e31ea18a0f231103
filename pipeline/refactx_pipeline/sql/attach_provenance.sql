-- After the provenance blocks' COPY: a unique B-tree on block (runtime lookups: block =
-- ANY(...)), then the partition's CHECK and ATTACH, like attach.sql for the tree.
-- Placeholders: {schema}, {table}, {index}, {check}, {build_id}.
-- Run in this order; statements 1-2 outside the attach transaction, 3-4 inside it.
CREATE UNIQUE INDEX {index} ON {schema}.{table} (block);
ANALYZE {schema}.{table};
ALTER TABLE {schema}.{table} ADD CONSTRAINT {check} CHECK (build_id = {build_id});
ALTER TABLE {schema}.provenance_blocks ATTACH PARTITION {schema}.{table} FOR VALUES IN ({build_id});
