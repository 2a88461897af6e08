# The relay image: `relay run`, `relay mirror`, `relay db upgrade` and the Spark jobs.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/outbox-relay
COPY pyproject.toml README.md alembic.ini ./
COPY relay ./relay
COPY migrations ./migrations
COPY jobs ./jobs
COPY examples ./examples
RUN pip install --no-cache-dir -e '.[spark]'
RUN useradd --system --uid 10001 relay
USER relay
# `relay run` and `relay mirror` serve /metrics, /healthz and /readyz on this port, on every
# interface (docs/operations.md, "Metrics and health"); the other commands and the Spark
# jobs serve nothing, so their containers turn the health check off.
ENV RELAY_METRICS_PORT=9100
EXPOSE 9100
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ['RELAY_METRICS_PORT'], timeout=4)"]
ENTRYPOINT ["relay"]
CMD ["run"]
