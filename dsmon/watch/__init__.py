"""Watching every recent run in the background: the health checklist and its webhook alerts."""
