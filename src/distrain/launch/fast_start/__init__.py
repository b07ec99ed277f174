"""Fast start, launcher side: workers forked from a server that imported torch once."""
