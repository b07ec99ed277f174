"""The nodes of a job: the rendezvous, the network choice, the agent's store, stopping together."""
