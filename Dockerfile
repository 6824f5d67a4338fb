# syntax=docker/dockerfile:1.7
#
# One dsmon image for every role (docs/kubernetes.md); its arguments are a dsmon command:
#   docker run -p 127.0.0.1:8501:8501 -v dsmon-data:/data \
#       -e DSMON_HEALTH_URL=http://127.0.0.1:8501/_stcore/health dsmon:0.1.0
#       the dashboard (the default command), UI on 8501, store /data/dsmon.sqlite
#   docker run -p 8502:8502 -v dsmon-data:/data -e DSMON_TOKEN=... dsmon:0.1.0 serve --host 0.0.0.0
#       the ingest server the collectors send to (/healthz, /metrics) on 8502
#   docker run -v /path/to/logs:/logs:ro -e DSMON_TOKEN=... -e DSMON_HEALTH_URL= dsmon:0.1.0 \
#       collect --log /logs/train.log --server http://dashboard-host:8502
#       a collector (what the Kubernetes sidecar runs); DSMON_HEALTH_URL= turns the
#       HEALTHCHECK off, since a collector serves no HTTP
#
# Two stages: the build stage turns this checkout into wheels (dsmon's and every dependency's
# of its full install), with a compiler at hand for any dependency that has no wheel for this
# platform; the runtime stage starts again from the slim base and installs those wheels the
# way the README does (a venv, then pip install), so no compiler or build tool ships.
# tests/test_dockerfile.py checks this file; there is no container engine in CI to build it.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# .dockerignore lets in only what `pip install .` reads: pyproject.toml, README.md, the
# packages and the dashboard scripts.
COPY . .
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels '.[all]'

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="dsmon" \
      org.opencontainers.image.description="Live monitor for DeepSpeed training runs: dashboard, ingest server and node collector" \
      org.opencontainers.image.licenses="Apache-2.0"
# tini as PID 1: it forwards SIGTERM to dsmon (a collector must flush before the pod goes)
# and reaps the dashboard's children.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*
# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 dsmon \
    && useradd --system --uid 10001 --gid dsmon --home-dir /home/dsmon --create-home \
       --shell /usr/sbin/nologin dsmon \
    && install -d -o dsmon -g dsmon /data /logs
ENV VIRTUAL_ENV=/opt/dsmon \
    PATH=/opt/dsmon/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# The README's install (the full one, `[all]`: one image for every role), from the wheels of
# the build stage (bind-mounted, so they leave no layer behind); --no-index: everything comes
# from there, nothing is fetched at this step.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/dsmon \
    && /opt/dsmon/bin/pip install --no-cache-dir --no-index --find-links=/wheels 'dsmon[all]'
# The store and the collectors' positions and spool live on /data; logs are read from /logs.
ENV DSMON_STORE=/data/dsmon.sqlite \
    XDG_STATE_HOME=/data/state \
    DSMON_HEALTH_URL=http://127.0.0.1:8502/healthz
VOLUME ["/data", "/logs"]
WORKDIR /data
USER 10001:10001
# 8501: the Streamlit UI (dsmon dashboard --port); 8502: the ingest API, /healthz, /metrics.
EXPOSE 8501 8502
# By default the check targets the ingest server, the part whose failure loses data: its
# /healthz answers 503 when the store does not answer, and urlopen raises on that and on a
# refused connection, so either fails the check. A UI-only container points DSMON_HEALTH_URL
# at Streamlit's /_stcore/health; an empty one (the collector role) passes. Python's urllib
# because the slim base has no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; url = os.environ.get('DSMON_HEALTH_URL', ''); url and r.urlopen(url, timeout=4).close()"]
ENTRYPOINT ["tini", "--", "dsmon"]
CMD ["dashboard", "--address", "0.0.0.0", "--no-browser"]
