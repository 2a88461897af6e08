# syntax=docker/dockerfile:1
# The relay's images, built from the wheel (docs/deployment.md, "Images"):
#
#   docker build -t outbox-relay .                                # relay run | mirror | db ...
#   docker build --target relay-spark -t outbox-relay-spark .    # the Spark jobs
#
# The default target, `relay`, has neither Java nor Spark. `relay-spark` adds Java 17 and
# the [spark] extra, and the three Spark entry points (jobs/*.py), run with spark-submit.
# Neither holds the source tree: each installs the wheel that the first stage builds.
# tests/unit/test_deployment_files.py checks these rules.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# The wheel, from what .dockerignore lets into the build context.
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md MANIFEST.in alembic.ini ./
COPY relay ./relay
COPY migrations ./migrations
RUN pip wheel --no-cache-dir --disable-pip-version-check --no-deps --wheel-dir /dist .

# What both images share: Python and an unprivileged user, nothing of the project yet.
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --system --uid 10001 --create-home --home-dir /home/relay relay
WORKDIR /home/relay

# The Spark jobs: `docker run outbox-relay-spark` runs the outbox job in local mode;
# `... /opt/outbox-relay/jobs/mirror.py --mapping FILE` the mirror job, `.../replicate.py`
# the replicator. Arguments after the script are the job's (its --master included:
# docs/deployment.md).
FROM runtime AS relay-spark
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=wheel,source=/dist,target=/dist \
    pip install --no-cache-dir "$(echo /dist/outbox_relay-*.whl)[spark]"
COPY jobs/outbox_relay.py jobs/mirror.py jobs/replicate.py /opt/outbox-relay/jobs/
USER relay
# A Spark job serves no endpoint.
HEALTHCHECK NONE
ENTRYPOINT ["spark-submit"]
CMD ["/opt/outbox-relay/jobs/outbox_relay.py"]

# `relay run`, `relay mirror`, `relay db upgrade` and the other commands: no Java, no
# Spark. The last stage, so the default target.
FROM runtime AS relay
RUN --mount=type=bind,from=wheel,source=/dist,target=/dist \
    pip install --no-cache-dir /dist/outbox_relay-*.whl
USER relay
# `relay run` and `relay mirror` serve /metrics, /healthz and /readyz on this port, on every
# interface (docs/operations.md, "Metrics and health"); the other commands serve nothing,
# so their containers turn the health check off.
ENV RELAY_METRICS_PORT=9100
EXPOSE 9100
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ['RELAY_METRICS_PORT'], timeout=4)"]
ENTRYPOINT ["relay"]
CMD ["run"]
