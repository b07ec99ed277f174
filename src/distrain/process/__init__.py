"""What one process of a job is and holds, below every worker layer: its description
(:class:`~distrain.process.info.ProcessInfo`), its reductions, its preemption state, its peers'
liveness and the one registry of patched names.  worker/, parallel/, data/ and checkpoint/ build
on it; it imports none of them."""
