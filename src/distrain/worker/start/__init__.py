"""What init() sets up before the Context: the process's start.

The restart-safe store (:mod:`.store`), the attempt every rank agrees on (:mod:`.attempt`), a
restarted attempt's bounded wait for its peers (:mod:`.rejoin`), the CPU threads
(:mod:`.threads`), NCCL's debugging aids (:mod:`.nccl_debug`) and the process title
(:mod:`.title`).
"""
