"""Where records live: a store (``store.py``) made of a backend and its parts.

Backends: ``sqlite.py`` and ``postgres.py`` (what differs between the engines, ``backend.py``,
``dialect.py``). Parts, each in its own package: ``records/`` (the record log and its
bookkeeping), ``gpu/`` (GPU samples in typed tables), ``ranks/`` (the probe's per-rank
tables), ``frames/`` (frames of a kind, sealed pages). ``url.py`` reads store URLs,
``schema.py`` says which stores this dsmon opens.
"""
