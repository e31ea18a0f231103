-- refactx_index catalog and tree tables. Idempotent: safe to run on every load.
-- The schema name is substituted by the loader (default "refactx").

CREATE SCHEMA IF NOT EXISTS {schema};

-- One row per build. status: loading -> loaded -> validated -> active -> retired | failed
CREATE TABLE IF NOT EXISTS {schema}.builds (
    build_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text        NOT NULL,            -- index name served to readers
    table_name        text        NOT NULL UNIQUE,     -- partition holding this build's rows
    vocabulary        text        NOT NULL,            -- vocabulary name
    vocabulary_sha256 text        NOT NULL,            -- sha256 of its tokenizer.json
    vocab_size        integer     NOT NULL,
    source            text        NOT NULL,
    dump_date         text        NOT NULL,
    depth             integer     NOT NULL,            -- D
    subtree_threshold integer     NOT NULL,            -- T
    format_version    integer     NOT NULL,
    fact_prefix       text        NOT NULL,
    fact_suffix       text        NOT NULL,
    facts             bigint,
    rows              bigint,
    table_bytes       bigint,
    index_bytes       bigint,
    parquet_path      text,
    status            text        NOT NULL DEFAULT 'loading',
    message           text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    loaded_at         timestamptz,
    activated_at      timestamptz,
    CHECK (status IN ('loading', 'loaded', 'validated', 'active', 'retired', 'failed'))
);

-- Which build serves each index name. Switching is one UPDATE in one transaction.
CREATE TABLE IF NOT EXISTS {schema}.active (
    name      text PRIMARY KEY,
    build_id  bigint NOT NULL REFERENCES {schema}.builds (build_id),
    since     timestamptz NOT NULL DEFAULT now()
);

-- The tree rows of every build; one LIST partition per build, attached once loaded.
-- Each partition has a unique B-tree on prefix; readers query the partition named in
-- the catalog by primary-key equality.
CREATE TABLE IF NOT EXISTS {schema}.tree (
    build_id  bigint NOT NULL,
    prefix    bytea  NOT NULL,   -- big-endian uint32 per token; root = ''
    node      bytea  NOT NULL    -- fragment, refactx_index.tree.format
) PARTITION BY LIST (build_id);

-- Added by the loader (compatible extensions of the tables above).
-- dropped_at: when retention dropped the build's table (its catalog row stays as history).
ALTER TABLE {schema}.builds ADD COLUMN IF NOT EXISTS dropped_at timestamptz;
CREATE INDEX IF NOT EXISTS builds_name_idx ON {schema}.builds (name, build_id);
-- retired_at: when the build stopped serving (the start of its retention grace period).
ALTER TABLE {schema}.builds ADD COLUMN IF NOT EXISTS retired_at timestamptz;
-- One build of an index name at a time: the build that holds the name from its load to its
-- activation (or failure). A claim whose build failed, served or was dropped is stale.
-- Where each stored fact comes from (verbalize/provenance): one LIST partition per build,
-- provenance_b<build_id>, loaded, attached and dropped with the build's tree partition; a
-- B-tree on fact_id (not unique: a fact read from several sources has several rows).
-- provenance_rows: the rows loaded (null: the build was loaded without provenance).
CREATE TABLE IF NOT EXISTS {schema}.provenance (
    build_id  bigint NOT NULL,
    fact_id   bigint NOT NULL,   -- xxhash64 of the fact's text (refactx_index.tree.provenance.fact_id)
    kind      text   NOT NULL,   -- statement | inverse | description | short_description
    subject   text   NOT NULL,
    property  text,
    object    text,
    value     text
) PARTITION BY LIST (build_id);
ALTER TABLE {schema}.builds ADD COLUMN IF NOT EXISTS provenance_rows bigint;
CREATE TABLE IF NOT EXISTS {schema}.building (
    name      text PRIMARY KEY,
    build_id  bigint NOT NULL REFERENCES {schema}.builds (build_id),
    since     timestamptz NOT NULL DEFAULT now()
);
-- index_kind: what the build's sequences are, facts (<s> <p> <o> .) or paths (A -> r -> B .).
ALTER TABLE {schema}.builds ADD COLUMN IF NOT EXISTS index_kind text NOT NULL DEFAULT 'facts';
-- Format versions 3 and 4: each build's preset dictionary (refactx_index.tree.format.PresetDictionary,
-- at most 64 KiB), written by the load before the build serves and read once by a reader
-- when it opens the build. A build without a row here has rows that need none.
CREATE TABLE IF NOT EXISTS {schema}.build_dictionaries (
    build_id    bigint PRIMARY KEY REFERENCES {schema}.builds (build_id),
    dictionary  bytea  NOT NULL
);
-- Where each stored fact comes from, packed (refactx_index.tree.provenance, layout 'blocks'): the
-- sources of the facts whose ids share their top provenance_block_bits bits are one block,
-- keyed by those bits (fact_id >> (64 - bits), signed); one LIST partition per build,
-- provenance_b<build_id>, with a unique B-tree on block. provenance_layout: 'blocks' here,
-- 'rows' for a build whose provenance_b<build_id> is a partition of provenance above (one text
-- row per source), null without provenance.
CREATE TABLE IF NOT EXISTS {schema}.provenance_blocks (
    build_id  bigint NOT NULL,
    block     bigint NOT NULL,   -- the top provenance_block_bits bits of its facts' ids
    data      bytea  NOT NULL    -- refactx_index.tree.provenance.encode_block
) PARTITION BY LIST (build_id);
ALTER TABLE {schema}.builds ADD COLUMN IF NOT EXISTS provenance_layout text;
ALTER TABLE {schema}.builds ADD COLUMN IF NOT EXISTS provenance_block_bits integer;
-- a build loaded with provenance before the catalog named layouts has the rows layout
UPDATE {schema}.builds SET provenance_layout = 'rows'
 WHERE provenance_rows IS NOT NULL AND provenance_layout IS NULL;
