# syntax=docker/dockerfile:1.7
#
# dsmon's images (docs/kubernetes.md); their arguments are a dsmon command:
#   docker run -p 127.0.0.1:8501:8501 -v dsmon-data:/data \
#       -e DSMON_HEALTH_URL=http://127.0.0.1:8501/_stcore/health dsmon:0.1.0
#       the dashboard (the default command), UI on 8501, store /data/dsmon.sqlite
#   docker run -p 8502:8502 -v dsmon-data:/data -e DSMON_TOKEN=... dsmon:0.1.0 serve --host 0.0.0.0
#       the ingest server the collectors send to (/healthz, /metrics) on 8502
#   docker run -v /path/to/logs:/logs:ro -v dsmon-state:/data -e DSMON_TOKEN=... \
#       dsmon-collector:0.1.0 collect --log /logs/train.log --server http://dashboard-host:8502
#       a collector (what the Kubernetes sidecar runs), from the light collector image
#
# Stages: "build" turns this checkout into wheels (dsmon's and every dependency's of its full
# install), with a compiler at hand for any dependency that has no wheel for this platform;
# "system" starts again from the base with what every role shares (tini, the user, the
# settings); "collector-venv" installs those wheels the way the README does (a venv, then pip
# install) for a node, "runtime" adds the rest of the full install, so no compiler or build
# tool ships:
#   docker build -t dsmon:0.1.0 .                                     every role (the default)
#   docker build --target collector -t dsmon-collector:0.1.0 .        the node's collector and
#       probe alone (`dsmon[collector]`, no dashboard stack): the Kubernetes sidecar's image
#
# The base is an argument: the official python:3.11-slim-bookworm by default, or any Debian
# (or Debian-like) image with Python 3.11 and its venv module, as scripts/containers.sh
# builds where no image registry is reachable (--build-arg PYTHON_IMAGE=...).
#
# Behind a TLS-intercepting proxy, pass the CA bundle that proxy's certificates chain to, and
# pip's own settings (an index mirror, say) if it needs them, as build secrets; neither is
# stored in an image layer, and without them pip uses its defaults:
#   docker build --secret id=ca-bundle,src=/etc/ssl/certs/ca-certificates.crt \
#                --secret id=pip.conf,src=$HOME/.config/pip/pip.conf -t dsmon:0.1.0 .
# tests/meta/test_dockerfile.py checks this file; tests/system/test_k8s_pod.py builds both
# images with Podman (scripts/containers.sh) and runs them as deploy/k8s says.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# Labelled as the images are, so that scripts/containers.sh can tell its old layers from others.
LABEL org.opencontainers.image.title="dsmon"
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# .dockerignore lets in only what `pip install .` reads: pyproject.toml, README.md, the
# packages and the dashboard scripts.
COPY . .
# pip from a venv of its own: the official image has pip in its Python, Debian's python3.11
# has not (its python3.11-venv has). PIP_CERT only when the ca-bundle secret was given.
RUN --mount=type=secret,id=ca-bundle \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    python -m venv /opt/pip \
    && if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && /opt/pip/bin/pip wheel --no-cache-dir --wheel-dir /wheels '.[all]' \
    && (cd /wheels && sha256sum -- *.whl) > /wheels.sha256

FROM ${PYTHON_IMAGE} AS system
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
# The store and the collectors' positions and spool live on /data; logs are read from /logs.
ENV VIRTUAL_ENV=/opt/dsmon \
    PATH=/opt/dsmon/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DSMON_STORE=/data/dsmon.sqlite \
    XDG_STATE_HOME=/data/state \
    DSMON_HEALTH_URL=http://127.0.0.1:8502/healthz
VOLUME ["/data", "/logs"]
WORKDIR /data
# By default the check targets the ingest server, the part whose failure loses data: its
# /healthz answers 503 when the store does not answer, and urlopen raises on that and on a
# refused connection, so either fails the check. A UI-only container points DSMON_HEALTH_URL
# at Streamlit's /_stcore/health; an empty one (the collector's default) passes. Python's
# urllib because the slim base has no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; url = os.environ.get('DSMON_HEALTH_URL', ''); url and r.urlopen(url, timeout=4).close()"]
ENTRYPOINT ["tini", "--", "dsmon"]

# The node's install, `dsmon[collector]`: `dsmon collect` and `dsmon probe` without the
# dashboard's dependencies. The wheels of the build stage are bind-mounted, so they leave no
# layer behind; --no-index: nothing is fetched at this step. Both images below start from it,
# so the full image is the collector's layers and one more (and one build makes both).
FROM system AS collector-venv
# The wheels' digests, kept in the image as the list of what it was installed from. Copied
# (not mounted) so that new wheels invalidate the cached install steps below: Buildah's layer
# cache does not look into a bind mount's content.
COPY --from=build /wheels.sha256 /usr/share/dsmon/wheels.sha256
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/dsmon \
    && /opt/dsmon/bin/pip install --no-cache-dir --no-index --find-links=/wheels 'dsmon[collector]'

# The Kubernetes sidecar's image (and its probe init container's). A collector serves no
# HTTP: nothing for the HEALTHCHECK to open.
FROM collector-venv AS collector
ENV DSMON_HEALTH_URL=
USER 10001:10001
CMD ["collect", "--help"]

# Every role (the default target): the README's full install, `dsmon[all]`, on the same venv.
FROM collector-venv AS runtime
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    /opt/dsmon/bin/pip install --no-cache-dir --no-index --find-links=/wheels 'dsmon[all]'
USER 10001:10001
# 8501: the Streamlit UI (dsmon dashboard --port); 8502: the ingest API, /healthz, /metrics.
EXPOSE 8501 8502
CMD ["dashboard", "--address", "0.0.0.0", "--no-browser"]
