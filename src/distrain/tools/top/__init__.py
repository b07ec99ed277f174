"""`distrain top RUN_DIR`: every rank of a job at a glance, from the files its recorders write.

:mod:`.status` reads a run directory's per-rank metrics (written by distrain/monitor/, the
worker's recorder) into one status per rank; :mod:`.groups` adds a ``--replicas`` job's groups and
heals; :mod:`.cli` draws them.  Workers never import it.
"""
