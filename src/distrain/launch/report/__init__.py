"""What the launcher says: the console filter, the end-of-job lines and notices, hints."""
