"""What init() sets up before the Context: the process's start.

The restart-safe store with a restarted attempt's bounded wait for its peers (:mod:`.store`),
the attempt every rank agrees on (:mod:`.attempt`), NCCL's debugging aids (:mod:`.nccl_debug`),
the process title (:mod:`.title`), and what an optional feature changes in the start
(:mod:`.features`, the worker's one seam).
"""
