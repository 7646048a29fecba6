"""Partition replication as a pure core over `storage.Log` (DESIGN §4); see `partition.py`."""
