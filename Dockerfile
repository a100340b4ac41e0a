# privacy-ledger: the API server, installed from its wheel. Build: docker build -t privacy-ledger .
# Run: docker run -p 8000:8000 -v ledger-data:/srv/privacy-ledger/data privacy-ledger
# (SQLite in the volume), or docker compose up (PostgreSQL; see docs/operations.md).

# --- build: the server and client wheels, from the source tree -------------------------------
FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY client ./client
COPY app ./app
COPY migrations ./migrations
# the server wheel carries the Alembic scripts (app/_migrations) and the dashboard's files
RUN pip wheel --no-deps --wheel-dir /wheels . ./client

# --- runtime: the wheels and their dependencies, no source tree ------------------------------
FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
COPY --from=build /wheels /tmp/wheels
RUN pip install /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels \
    && useradd --system --uid 10001 --no-create-home --home-dir /srv/privacy-ledger ledger \
    && mkdir -p /srv/privacy-ledger/data \
    && chown ledger /srv/privacy-ledger/data

WORKDIR /srv/privacy-ledger
USER ledger
# WEB_CONCURRENCY: uvicorn worker processes. 1 suits SQLite (its writes are serialised in one
# process); with PostgreSQL use about one per core (docker-compose.yml sets it).
ENV PRIVACY_LEDGER_DATABASE_URL=sqlite:////srv/privacy-ledger/data/privacy_ledger.db \
    WEB_CONCURRENCY=1 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/privacy-ledger-metrics

EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"]

# a fresh multiprocess metrics directory (/metrics sums every worker's counters), migrate, then
# serve: `privacy-ledger serve` runs uvicorn (uvloop + httptools) with WEB_CONCURRENCY workers
CMD ["sh", "-c", "rm -rf \"$PROMETHEUS_MULTIPROC_DIR\" && mkdir -p \"$PROMETHEUS_MULTIPROC_DIR\" && privacy-ledger migrate && exec privacy-ledger serve --host 0.0.0.0 --port 8000"]
