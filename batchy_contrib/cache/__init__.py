"""Caches in front of a loader: memcached and the read-through pattern it is built on."""
