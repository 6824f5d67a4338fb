"""Frames of a run's kinds, read in pages; sealed pages kept as Arrow tables."""
