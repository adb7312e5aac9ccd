"""Job stores beyond the built-in memory and SQLite ones: Redis and PostgreSQL."""
