# Two images from one file:
#   docker build --target exporter -t slicemeter-exporter .   the node agent: the base install only
#                                                            (no DuckDB, pandas or Streamlit)
#   docker build -t slicemeter .                             every other subcommand (ingest, export,
#                                                            dashboard, ...): the `all` group
# Both: ENTRYPOINT slicemeter, numeric non-root user 10001.
FROM python:3.11-slim AS base

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . /app
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/slicemeter --create-home slicemeter \
 && mkdir -p /data /var/lib/slicemeter/spool \
 && chown -R 10001:10001 /data /var/lib/slicemeter

FROM base AS exporter
RUN pip install . && python -m compileall -q /app
USER 10001:10001
EXPOSE 9400
ENTRYPOINT ["slicemeter"]
CMD ["exporter", "--help"]

# The default target. A regular install: the SQL files (sql/) ship as package data. The
# examples stay in /app; SLICEMETER_PRICES points the default price catalog there.
FROM base AS central
ENV SLICEMETER_PRICES=/app/examples/prices.yaml
RUN pip install '.[all]' && python -m compileall -q /app
USER 10001:10001
# ingest /metrics, dashboard (the compose demo also runs simulated exporters on 9400)
EXPOSE 9400 9401 8501
ENTRYPOINT ["slicemeter"]
CMD ["--help"]
