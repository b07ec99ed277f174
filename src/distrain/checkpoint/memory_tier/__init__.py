"""The checkpointer's tmpfs tier (``memory_every_steps``): :mod:`.tier` snapshots and restores,
:mod:`.files` writes, verifies and sweeps a snapshot's files, :mod:`.peer` copies each node's
snapshot to a peer node; imported only by a checkpointer that asks for the tier."""
