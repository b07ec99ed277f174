"""What one process of a job is and holds, below every worker layer: its description
(:class:`~distrain.process.info.ProcessInfo`), its reductions, its preemption state, its peers'
liveness, its cores (:mod:`.cores`), its ties to its parent (:mod:`.lineage`) and the one
registry of patched names.  A SLURM job's requeue is the scheduler's
(distrain/cluster/slurm_requeue.py).  worker/, parallel/, data/ and checkpoint/ build on it; it
imports none of them."""
