# The slicemeter image: every subcommand (exporter, ingest, dashboard, ...), ENTRYPOINT slicemeter.
#   docker build -t slicemeter .      docker run --rm slicemeter --help
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . /app

# A regular install: the SQL files (sql/) ship as package data. The examples stay in /app;
# SLICEMETER_PRICES points the default price catalog there.
ENV SLICEMETER_PRICES=/app/examples/prices.yaml
RUN pip install . \
 && python -m compileall -q /app \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/slicemeter --create-home slicemeter \
 && mkdir -p /data /var/lib/slicemeter/spool \
 && chown -R 10001:10001 /data /var/lib/slicemeter

# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001

# exporter /metrics, ingest /metrics, dashboard
EXPOSE 9400 9401 8501

ENTRYPOINT ["slicemeter"]
CMD ["--help"]
