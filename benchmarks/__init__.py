"""Benchmarks, run side by side with their peers in one process: `make bench`."""
