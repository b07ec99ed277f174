"""What init() sets up before the Context: the process's start.

The restart-safe store with a restarted attempt's bounded wait for its peers (:mod:`.store`),
the attempt every rank agrees on (:mod:`.attempt`), NCCL's debugging aids (:mod:`.nccl_debug`)
and the process title (:mod:`.title`).
"""
