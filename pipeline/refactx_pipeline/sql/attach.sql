-- After COPY: the unique B-tree on the key, then the partition's CHECK and ATTACH in one
-- short transaction (the CHECK lets ATTACH skip its validation scan).
-- Placeholders: {schema}, {table}, {index}, {check}, {build_id}.
-- Run in this order; statements 1-2 outside the attach transaction, 3-4 inside it.
CREATE UNIQUE INDEX {index} ON {schema}.{table} (prefix);
ANALYZE {schema}.{table};
ALTER TABLE {schema}.{table} ADD CONSTRAINT {check} CHECK (build_id = {build_id});
ALTER TABLE {schema}.tree ATTACH PARTITION {schema}.{table} FOR VALUES IN ({build_id});
