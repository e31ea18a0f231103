-- Switch the build serving an index name. One transaction, run by refactx_pipeline/activate.py
-- with parameters %(name)s, %(build_id)s and %(channel)s. The previous build (if any) becomes
-- 'retired' (retired_at starts its retention grace period). NOTIFY is delivered at commit:
-- served indexes that LISTEN on the channel switch to the new build by themselves.
UPDATE {schema}.builds b SET status = 'retired', retired_at = now()
  FROM {schema}.active a
 WHERE a.name = %(name)s AND b.build_id = a.build_id AND b.build_id <> %(build_id)s;
INSERT INTO {schema}.active (name, build_id, since) VALUES (%(name)s, %(build_id)s, now())
    ON CONFLICT (name) DO UPDATE SET build_id = EXCLUDED.build_id, since = EXCLUDED.since;
UPDATE {schema}.builds SET status = 'active', activated_at = now() WHERE build_id = %(build_id)s;
SELECT pg_notify(%(channel)s, %(name)s);
