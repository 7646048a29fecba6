"""The simulation kernel shared by the quorum and cluster simulations: disk, network, clocks, faults."""
