"""Distributed data: the resumable global-batch sampler, eval shards, loaders."""
