"""Fast start, worker side: the fork server's preload and the forked worker."""
