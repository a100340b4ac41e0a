# privacy-ledger: the API server. Build: docker build -t privacy-ledger .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/privacy-ledger

COPY pyproject.toml README.md ./
COPY app ./app
COPY migrations ./migrations
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /srv/privacy-ledger ledger \
    && mkdir -p /srv/privacy-ledger/data \
    && chown -R ledger /srv/privacy-ledger/data

USER ledger
ENV PRIVACY_LEDGER_DATABASE_URL=sqlite:////srv/privacy-ledger/data/privacy_ledger.db \
    WEB_CONCURRENCY=4 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/privacy-ledger-metrics

EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"]

# fresh multiprocess metrics dir (every worker's counters are summed at /metrics), migrate,
# then serve with uvicorn[standard] (uvloop + httptools) and several workers; the app writes
# its own JSON access lines, so uvicorn's are off
CMD ["sh", "-c", "rm -rf \"$PROMETHEUS_MULTIPROC_DIR\" && mkdir -p \"$PROMETHEUS_MULTIPROC_DIR\" && python -m app.cli migrate && exec uvicorn app.main:app --host 0.0.0.0 --port 8000 --workers ${WEB_CONCURRENCY} --loop uvloop --http httptools --no-access-log"]
