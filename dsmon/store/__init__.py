"""Where records live: the SQLite and PostgreSQL stores, and GPU samples' typed tables."""
