"""PostgreSQL edge of the relay (SQLAlchemy 2 + psycopg 3)."""
