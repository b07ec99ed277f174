"""What a worker trains with: data order, SyncBN, gradient sync, checkpoints, signals, watchdog, failures.

Each module is one component the :class:`~distrain.runtime.context.Context` hands to scripts.
"""
