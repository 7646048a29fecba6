"""Deterministic simulation of partition replication: brokers, a controller, clients, faults."""
