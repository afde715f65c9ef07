"""Team memory: one project's memory shared through a PostgreSQL server (psycopg imported only here)."""
