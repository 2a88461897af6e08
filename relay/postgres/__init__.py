"""The PostgreSQL adapter, for every direction: the only package that imports SQLAlchemy,
psycopg or Alembic."""
