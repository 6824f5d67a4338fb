"""The ingest HTTP server: request bodies, checked batches, tokens, /metrics, and running it."""

#: The ingest API's default TCP port. Here, not in ``run``, so that building the command line
#: (every command, the node collector too) does not load uvicorn.
DEFAULT_PORT = 8502
