"""Launcher-side tools: `distrain doctor`, `distrain bench`, `distrain export`."""
