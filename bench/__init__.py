"""Reproducible benchmarks (`make bench`); each module prints its tables and removes its data."""
