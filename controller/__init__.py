"""The controller quorum: Raft (controller/raft.py) over the metadata log, and the cluster metadata."""
