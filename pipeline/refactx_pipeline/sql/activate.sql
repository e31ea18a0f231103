-- Switch the build serving an index name. One transaction, run by jobs/activate.py with
-- parameters %(name)s and %(build_id)s. The previous build (if any) becomes 'retired'.
UPDATE {schema}.builds b SET status = 'retired'
  FROM {schema}.active a
 WHERE a.name = %(name)s AND b.build_id = a.build_id AND b.build_id <> %(build_id)s;
INSERT INTO {schema}.active (name, build_id, since) VALUES (%(name)s, %(build_id)s, now())
    ON CONFLICT (name) DO UPDATE SET build_id = EXCLUDED.build_id, since = EXCLUDED.since;
UPDATE {schema}.builds SET status = 'active', activated_at = now() WHERE build_id = %(build_id)s;
