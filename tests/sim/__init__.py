"""Deterministic simulation of the controller quorum (DESIGN §2, STYLE §6-7): `python -m tests.sim.run`."""
