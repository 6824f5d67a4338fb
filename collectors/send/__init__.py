"""Delivering a node's records to the ingest server, at least once.

The sender, its on-disk spool for outages, and the HTTP transport.
"""
