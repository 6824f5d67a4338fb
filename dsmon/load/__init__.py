"""Saved output into records: run folders and log files, dsmon's own records files, playback."""
