"""The record model: records, their JSON-lines codec, units, and records as tables."""
