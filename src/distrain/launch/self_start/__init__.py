"""Self-start, launcher side: scripts that start their own workers, run once."""
