"""SQL data sources: batched loaders over MySQL/MariaDB and SQLite, sharing one core."""
