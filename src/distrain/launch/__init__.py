"""The `distrain run` process: CLI, plan, network choice, the features behind one seam,
mpirun/horovodrun, spawn.

Nothing here imports the worker side (:mod:`distrain.worker`, :mod:`distrain.worker`); what
the two sides share is :mod:`distrain.contract`.
"""
