"""The PostgreSQL adapter: the only package that imports psycopg."""

from venturi.postgres.backend import PostgresBackend

__all__ = ["PostgresBackend"]
