# hookstream worker image: `docker build -t hookstream .` (SPEC X2, X3).
#
# One image serves every role: `hookstream worker` (the default), `hookstream topics apply`
# (the compose `topics` service and the Helm pre-install hook) and any other CLI command.
# Configuration is HOOKSTREAM_* environment only (SPEC X5); see docs/deployment.md.
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed, unprivileged user (uid/gid 10001): the data volume and the Helm chart's securityContext
# use the same numbers.
RUN groupadd --system --gid 10001 hookstream \
 && useradd --system --uid 10001 --gid hookstream --home-dir /app \
      --shell /usr/sbin/nologin hookstream

WORKDIR /app

# The package is installed from the repo the way CI installs it, minus the dev extras. It stays an
# editable install because the Avro codec reads the .avsc files from schemas/ beside streams/ (see
# streams.adapters.codec.schemas_dir); a site-packages install would not find them.
COPY pyproject.toml README.md topics.yaml ./
COPY schemas/ ./schemas/
COPY streams/ ./streams/
RUN pip install -e . \
 && install -d -o hookstream -g hookstream -m 0750 /var/lib/hookstream

# Defaults for a container; every one can be overridden at run time.
#   HOOKSTREAM_WEB_HOST  bind all interfaces so probes and Prometheus reach the worker
#   HOOKSTREAM_DATA_DIR  RocksDB tables live here: mount a volume (compose) or a PVC (Helm)
#   HOOKSTREAM_TOPICS_FILE  the topics.yaml baked into the image; Helm mounts its ConfigMap copy
ENV HOOKSTREAM_WEB_HOST=0.0.0.0 \
    HOOKSTREAM_WEB_PORT=6066 \
    HOOKSTREAM_DATA_DIR=/var/lib/hookstream \
    HOOKSTREAM_TOPICS_FILE=/app/topics.yaml

VOLUME ["/var/lib/hookstream"]
EXPOSE 6066

USER 10001:10001

# /healthz answers once the worker's web server is up (streams.app.register_probes).
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('HOOKSTREAM_WEB_PORT', '6066') + '/healthz', timeout=2)"]

ENTRYPOINT ["hookstream"]
CMD ["worker"]
