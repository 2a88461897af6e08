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
ENTRYPOINT ["relay"]
CMD ["run"]
