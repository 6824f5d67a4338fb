"""The top floor: the ``dsmon`` command line, one module per command (:mod:`cli.main`).

A command module parses its arguments, calls the work in ``dsmon`` (the core) or
``collectors`` (the node side), and prints; the supervision of child processes, the
Streamlit UI's start and the alert options are here too, since only commands need them.
``cli`` imports ``dsmon`` and ``collectors``; nothing imports ``cli``.
"""
