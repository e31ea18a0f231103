"""The PostgreSQL catalog (``pgcatalog``: builds, partitions, claims, SQL from ``sql/``) and the
embedded PostgreSQL started when no DSN is configured (``embedded``).

Layer 1 (docs/architecture.md): imports only the foundation modules of the package.
"""
