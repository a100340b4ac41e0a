"""No Docker engine runs here: check what can be checked of the Dockerfile and compose file."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _dockerfile() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile() -> None:
    instr = _dockerfile()
    words = [w for w, _ in instr]
    assert instr[0] == ("FROM", "python:3.11-slim")
    users = [rest for w, rest in instr if w == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert words.index("USER") < words.index("CMD")
    assert ("EXPOSE", "8000") in instr
    health = next(rest for w, rest in instr if w == "HEALTHCHECK")
    assert "/healthz" in health
    run = " ".join(rest for w, rest in instr if w == "RUN")
    assert "pip install ." in run and "[dev]" not in run
    cmd = next(rest for w, rest in instr if w == "CMD")
    assert re.search(r"app\.cli migrate && exec uvicorn app\.main:app", cmd)
    assert "--workers" in cmd


def test_compose() -> None:
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    pg, app = spec["services"]["postgres"], spec["services"]["app"]
    assert pg["image"] == "postgres:16"
    volume = pg["volumes"][0].split(":")[0]
    assert volume in spec["volumes"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert app["build"] == "."
    assert app["depends_on"]["postgres"]["condition"] == "service_healthy"
    env = app["environment"]
    url = env["PRIVACY_LEDGER_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@postgres:5432/" in url
    user = pg["environment"]["POSTGRES_USER"]
    db = pg["environment"]["POSTGRES_DB"]
    assert f"{user}:" in url and url.endswith("/" + db)
    assert "8000:8000" in app["ports"]
    command = " ".join(app["command"])
    assert re.search(r"python -m app\.cli migrate && exec uvicorn app\.main:app", command)
    workers = int(re.search(r"--workers (\d+)", command).group(1))
    assert workers >= 2
