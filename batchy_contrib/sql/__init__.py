"""SQL data sources: batched loaders over MySQL/MariaDB, PostgreSQL and SQLite, sharing one core."""
