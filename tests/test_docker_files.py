"""No Docker engine runs here: the Dockerfile and compose file are parsed and their structure
checked. The image must be built from the wheel (tests/packaging/test_wheel.py builds that same
wheel from the same COPY sources and runs it), run as a non-root user, and say how it is healthy.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.packaging.dockerfile import Stage, exec_form, stages

ROOT = Path(__file__).resolve().parent.parent


def _build_and_runtime() -> tuple[Stage, Stage]:
    all_stages = stages()
    assert len(all_stages) >= 2, "multi-stage: a build stage, then the runtime stage"
    build, runtime = all_stages[0], all_stages[-1]
    assert build.name, "the build stage is named, so the runtime stage can copy from it"
    return build, runtime


def _wheel_dir(build: Stage) -> str:
    runs = [r for r in build.values("RUN") if "pip wheel" in r]
    assert len(runs) == 1, build.values("RUN")
    match = re.search(r"(?:--wheel-dir|-w)[ =](\S+)", runs[0])
    assert match, runs[0]
    return match.group(1)


def test_build_stage_makes_the_wheels_from_the_source_tree() -> None:
    build, runtime = _build_and_runtime()
    assert build.base == runtime.base, "wheels built and installed on the same Python"
    sources = {Path(s).as_posix() for c in build.copies() for s in c.sources}
    assert {"pyproject.toml", "README.md", "app", "migrations", "client"} <= sources
    run = next(r for r in build.values("RUN") if "pip wheel" in r)
    assert "--no-deps" in run and " ./client" in run and " . " in f"{run} "


def test_runtime_stage_installs_the_wheels_and_not_the_source_tree() -> None:
    build, runtime = _build_and_runtime()
    wheels = _wheel_dir(build)
    copies = runtime.copies()
    assert copies, "the runtime stage copies the wheels from the build stage"
    for c in copies:
        assert c.word == "COPY" and c.flags.get("from") == build.name, c
        assert c.sources == [wheels], c
    dest = copies[0].dest.rstrip("/")
    installs = [r for r in runtime.values("RUN") if "pip install" in r]
    assert len(installs) == 1 and f"{dest}/*.whl" in installs[0], installs
    assert not re.search(r"pip install[^&]*(\s-e\s|\s\.(\s|$)|\[dev\])", installs[0]), installs[0]


def test_runtime_runs_as_a_non_root_user_with_a_healthcheck() -> None:
    _, runtime = _build_and_runtime()
    words = runtime.words()
    users = runtime.values("USER")
    assert users and users[-1].split(":")[0] not in ("root", "0", "")
    assert words.index("USER") < words.index("CMD")
    assert any("useradd" in r and users[-1] in r for r in runtime.values("RUN"))
    assert runtime.values("EXPOSE") == ["8000"]
    (health,) = runtime.values("HEALTHCHECK")
    options, _, command = health.partition("CMD")
    assert re.search(r"--interval=\d+s", options) and re.search(r"--timeout=\d+s", options)
    assert "http://127.0.0.1:8000/healthz" in " ".join(exec_form(command.strip()))


def test_command_migrates_then_serves_with_web_concurrency_workers() -> None:
    _, runtime = _build_and_runtime()
    (cmd,) = runtime.values("CMD")
    argv = exec_form(cmd)
    assert argv[:2] == ["sh", "-c"]
    assert (
        "privacy-ledger migrate && exec privacy-ledger serve --host 0.0.0.0 --port 8000" in argv[2]
    )
    assert "--workers" not in argv[2], "the worker count comes from WEB_CONCURRENCY"
    env = runtime.env()
    assert int(env["WEB_CONCURRENCY"]) >= 1
    assert env["PRIVACY_LEDGER_DATABASE_URL"].startswith("sqlite:////srv/privacy-ledger/data/")


def test_dockerignore_keeps_local_state_and_secrets_out_of_the_context() -> None:
    patterns = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", ".env", "secrets", "*.db", "**/build"} <= patterns


def _compose() -> dict[str, Any]:
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(spec, dict)
    return spec


def _interpolated(value: str) -> list[tuple[str, str]]:
    """The ``${NAME...}`` references in a compose value: (name, the rest: default or error)."""
    return re.findall(r"\$\{([A-Z_][A-Z0-9_]*)([^}]*)\}", value)


def test_compose_runs_postgres_and_the_image() -> None:
    spec = _compose()
    pg, app = spec["services"]["postgres"], spec["services"]["app"]
    assert pg["image"] == "postgres:16"
    assert pg["volumes"][0].split(":")[0] in spec["volumes"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert app["build"] == "."
    assert app["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "8000:8000" in app["ports"]
    assert "command" not in app, "the image's CMD migrates and serves (WEB_CONCURRENCY workers)"
    url = app["environment"]["PRIVACY_LEDGER_DATABASE_URL"]
    user, db = pg["environment"]["POSTGRES_USER"], pg["environment"]["POSTGRES_DB"]
    assert url == f"postgresql+psycopg://{user}@postgres:5432/{db}"


def test_the_password_comes_from_the_env_file_not_the_compose_file() -> None:
    spec = _compose()
    pg, app = spec["services"]["postgres"], spec["services"]["app"]
    for service in (pg, app):
        for name, value in service["environment"].items():
            if "PASSWORD" in name:
                refs = _interpolated(str(value))
                assert [r[0] for r in refs] == ["POSTGRES_PASSWORD"] and value.startswith("${"), (
                    name,
                    value,
                )
                assert refs[0][1].startswith(":?"), (
                    "no default: compose refuses to start without it"
                )
    assert "@" in app["environment"]["PRIVACY_LEDGER_DATABASE_URL"]
    assert ":" not in app["environment"]["PRIVACY_LEDGER_DATABASE_URL"].split("//")[1].split("@")[0]
    assert "PGPASSWORD" in app["environment"]  # libpq reads it; the URL carries no password
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in ignored and ".env" in (ROOT / ".dockerignore").read_text().splitlines()


def test_the_env_example_names_every_variable_compose_reads() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    used = {name for name, _ in _interpolated(text)}
    example = {
        line.split("=", 1)[0]
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert used == example == {"POSTGRES_PASSWORD", "PRIVACY_LEDGER_ADMIN_KEY", "WEB_CONCURRENCY"}


def test_web_concurrency_sets_the_worker_count() -> None:
    app = _compose()["services"]["app"]
    ((name, default),) = _interpolated(app["environment"]["WEB_CONCURRENCY"])
    assert name == "WEB_CONCURRENCY" and int(default.removeprefix(":-")) >= 2


def test_the_env_example_leaves_the_password_empty() -> None:
    """README's Docker steps are ``cp .env.example .env`` then ``docker compose up``: the
    example carried ``POSTGRES_PASSWORD=change-me``, so a copy nobody edited started PostgreSQL
    with a password everyone knows. Empty, compose's ``${POSTGRES_PASSWORD:?...}`` refuses to
    start until one is set."""
    values = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert values["POSTGRES_PASSWORD"] == ""
