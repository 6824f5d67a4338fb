"""Following a run's files on a node, none of their lines sent twice or lost.

Logs across rotation and restarts, the flops profiler's rewritten file, the probe's files, and
the positions saved between collectors.
"""
