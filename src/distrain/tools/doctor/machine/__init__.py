"""`distrain doctor`'s probes of this machine: GPUs, the torch build and its compatibility,
containers, limits, network, optional tools; :mod:`.local` runs them all, each bounded in time."""
