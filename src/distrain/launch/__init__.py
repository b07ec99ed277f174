"""The `distrain run` process: CLI, plan, network choice, fork server, mpirun/horovodrun, spawn.

Nothing here imports the worker side (:mod:`distrain.runtime`, :mod:`distrain.train`); what
the two sides share is :mod:`distrain.contract`.
"""
