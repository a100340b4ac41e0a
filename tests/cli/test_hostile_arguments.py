"""Hostile arguments end in one ``error:`` line and a non-zero exit, never a traceback (h3
finding 13: 22 cases ended in a Python traceback). One test per class of input: numbers that are
not finite, JSON the server cannot be sent, text that is not UTF-8, header values that are not
ASCII, URLs that are not valid, database URLs that name nothing usable. And the other side: an
exception that is a bug of the CLI stays visible, with its traceback and a line that says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

import app.cli.datasets as datasets_cli
from app.cli import cli
from app.config import get_settings
from tests.cli.conftest import Cli
from tests.conftest import ADMIN_KEY
from tests.live import ROOT


def _error_line(r: Result, code: int) -> str:
    """The last line of stderr, checked to be the error (``error:`` from the CLI, ``Error:``
    from typer's check of an option), after an exit with ``code`` and no traceback."""
    assert r.exit_code == code, (r.stdout, r.stderr, r.exception)
    assert isinstance(r.exception, SystemExit), r.exception  # not an exception out of a command
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.lower().startswith("error:"), r.stderr
    return last


def _nothing_charged(client: TestClient) -> None:
    assert client.get("/v1/datasets/census/budget").json()["entries"] == 0


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """SQLite only (``client`` and ``run`` build on it): these arguments are refused by the CLI
    before any request, or are about how it shows an answer; the server's side of hostile input
    runs on both databases in tests/api/test_hostile_*.py. On both, this module cost 33 s more
    CPU, 3 % of the suite's, for no path that differs."""
    return sqlite_url


@pytest.fixture
def census(run: Cli) -> dict[str, Any]:
    made = run.dataset("census")
    run("allocations", "create", "census", "team-a", "--epsilon", "0.5", "--delta", "1e-6")
    return made


# --- numbers ----------------------------------------------------------------------------------

NUMBER_OPTIONS = [
    ["datasets", "create", "x", "--epsilon", "{v}", "--delta", "1e-6"],
    ["datasets", "create", "x", "--epsilon", "1", "--delta", "{v}"],
    [
        "datasets",
        "create",
        "x",
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--partition",
        "day",
        "--lifetime-epsilon",
        "{v}",
        "--lifetime-delta",
        "1e-6",
    ],  # fmt: skip
    ["datasets", "update", "census", "--epsilon", "{v}"],
    ["datasets", "update", "census", "--lifetime-delta", "{v}"],
    ["allocations", "create", "census", "team-b", "--epsilon", "{v}", "--delta", "1e-6"],
    ["allocations", "set-budget", "census", "team-a", "--delta", "{v}"],
    ["compose", "{plan}", "--delta", "{v}"],
]


@pytest.mark.parametrize("value", ["nan", "-inf", "1e400"])
@pytest.mark.parametrize("args", NUMBER_OPTIONS, ids=[" ".join(a[:2]) for a in NUMBER_OPTIONS])
def test_a_number_that_is_not_finite_is_refused_by_its_option(
    run: Cli, census: dict[str, Any], tmp_path: Path, args: list[str], value: str
) -> None:
    """Typer read nan, inf and 1e400 (inf) as floats, and the client's JSON encoder then failed
    with ValueError: Out of range float values are not JSON compliant."""
    plan = tmp_path / "plan.json"
    plan.write_text('[{"mechanism": "gaussian", "sigma": 2}]')
    line = _error_line(run(*(a.format(v=value, plan=plan) for a in args), code=2), 2)
    assert "must be a finite number" in line and repr(value) in line
    (only,) = run.json("datasets")  # nothing created, nothing changed
    assert only["name"] == "census" and only["budget"] == {"epsilon": 1.0, "delta": 1e-6}
    assert only.get("lifetime_budget") is None
    (team,) = run.json("allocations", "list", "census")
    assert team["name"] == "team-a" and team["budget"] == {"epsilon": 0.5, "delta": 1e-6}


@pytest.mark.parametrize("value", ["nan", "inf", "1e400"])
def test_prune_idempotency_refuses_a_number_that_is_not_finite_as_usage(
    tmp_path: Path, value: str
) -> None:
    """The docs promise exit 2 for a number option that is not finite; ``--older-than-days``
    was read as a plain float and refused by the command itself, with exit 1 (adopt45)."""
    db = tmp_path / "ledger.db"
    args = ["prune-idempotency", "--older-than-days", value, "--database-url", f"sqlite:///{db}"]
    line = _error_line(CliRunner().invoke(cli, args), 2)
    assert "must be a finite number" in line and repr(value) in line
    assert not db.exists()  # refused before the database was opened


def test_finite_numbers_still_pass(run: Cli, census: dict[str, Any], tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('[{"mechanism": "gaussian", "sigma": 2}]')
    assert run.json("compose", str(plan), "--delta", "1e-5")["delta"] == 1e-5
    assert run.json("datasets", "update", "census", "--epsilon", "2.5")["budget"]["epsilon"] == 2.5


# --- JSON arguments ---------------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000

JSON_CASES = [
    ("--mechanism-json", '{"mechanism": "gaussian", "sigma": NaN}', "NaN is not a JSON number"),
    ("--mechanism-json", '{"mechanism": "gaussian", "sigma": 1e400}', "beyond the range"),
    ("--mechanism-json", DEEP, "nested too deeply"),
    ("--mechanism-json", '{"mechanism": "gaussian\\ud800", "sigma": 2}', "surrogate (U+D800)"),
    ("--metadata", '{"a": Infinity}', "Infinity is not a JSON number"),
    ("--metadata", '{"a": -Infinity}', "-Infinity is not a JSON number"),
    ("--metadata", '{"a": "\\ud800"}', "the string at $.a contains a lone UTF-16 surrogate"),
    ("--metadata", '{"a": [' + DEEP + "]}", "nested too deeply"),
]


@pytest.mark.parametrize(("option", "text", "why"), JSON_CASES)
@pytest.mark.parametrize("command", ["charge", "reserve"])
def test_json_the_server_cannot_be_sent_is_refused_by_its_option(
    run: Cli, census: dict[str, Any], command: str, option: str, text: str, why: str
) -> None:
    """NaN, Infinity and 1e400 failed in the client's JSON encoder, a lone surrogate in its
    UTF-8 encoder, and 100,000 nested brackets in Python's JSON parser (RecursionError)."""
    flags = [] if option == "--mechanism-json" else ["--sigma", "5"]
    line = _error_line(run(command, "census", *flags, option, text, code=2), 2)
    assert option in line and why in line
    _nothing_charged(run.client)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('[{"mechanism": "gaussian", "sigma": NaN}]', "NaN is not a JSON number"),
        ('[{"mechanism": "gaussian", "sigma": 1e999}]', "beyond the range"),
        ('[{"mechanism": "gaussian\\udcff", "sigma": 2}]', "surrogate (U+DCFF)"),
        (DEEP, "nested too deeply"),
    ],
    ids=["nan", "1e999", "surrogate", "deep"],
)
def test_a_plan_the_server_cannot_be_sent_is_a_one_line_error(
    run: Cli, tmp_path: Path, content: str, why: str
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(content)
    line = _error_line(run("compose", str(plan), code=1), 1)
    assert str(plan) in line and why in line


# --- text that is not UTF-8, headers that are not ASCII ------------------------------------------

NOT_UTF8 = "\udcff\udcfe"
"""How Python hands over an argument holding the bytes 0xff 0xfe (not UTF-8): os.fsdecode's
surrogate escapes."""


@pytest.mark.parametrize(
    "args",
    [
        ["charge", NOT_UTF8, "--sigma", "5"],
        ["charge", "census", "--sigma", "5", "--label", NOT_UTF8],
        ["charge", "census", "--sigma", "5", "--allocation", NOT_UTF8],
        ["reserve", "census", "--sigma", "5", "--label", "ok " + NOT_UTF8],
        ["audit", "--dataset", NOT_UTF8],
        ["status", NOT_UTF8],
        ["datasets", "create", NOT_UTF8, "--epsilon", "1", "--delta", "1e-6"],
        ["datasets", "update", "census", "--description", NOT_UTF8],
        ["keys", "create", "--role", "viewer", "--label", NOT_UTF8],
        ["ledger", "census", "--kind", NOT_UTF8],
    ],
    ids=lambda a: " ".join(x for x in a[:3] if x.isascii()),
)
def test_an_argument_that_is_not_utf8_is_a_one_line_error(
    run: Cli, census: dict[str, Any], args: list[str]
) -> None:
    line = _error_line(run(*args, code=1), 1)
    assert "not UTF-8 text" in line and "byte 0xff" in line
    _nothing_charged(run.client)
    assert [d["name"] for d in run.json("datasets")] == ["census"]


def test_an_idempotency_key_that_is_not_ascii_is_a_one_line_error(
    run: Cli, census: dict[str, Any]
) -> None:
    r = run("charge", "census", "--sigma", "5", "--idempotency-key", "café", code=1)
    assert "--idempotency-key holds U+00E9 'é'" in _error_line(r, 1)
    _nothing_charged(run.client)


@pytest.mark.parametrize("bad", ["é", "\n", "\x00", "\udcff"])
def test_an_api_key_with_characters_no_key_has_is_named_without_the_key(
    run: Cli, census: dict[str, Any], bad: str
) -> None:
    key = f"secret-{bad}-{ADMIN_KEY}"
    r = run("status", "census", "--api-key", key, code=1)
    line = _error_line(r, 1)
    assert "PRIVACY_LEDGER_API_KEY" in line and "printable ASCII" in line
    assert ADMIN_KEY not in r.output + r.stderr and "secret" not in r.stderr


# --- URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1]:99999x", "http://h:port"])
def test_a_server_url_that_is_not_valid_is_a_one_line_error(
    run: Cli, census: dict[str, Any], url: str
) -> None:
    line = _error_line(run("status", "census", "--url", url, code=1), 1)
    assert f"{url!r} is not a server URL" in line and "PRIVACY_LEDGER_URL" in line


def test_a_server_url_that_is_not_valid_is_named_once(run: Cli, census: dict[str, Any]) -> None:
    """The client said where the URL came from ("the url argument", which is what the CLI
    passes for PRIVACY_LEDGER_URL too) inside a message that quoted it again (an outside
    check): one clause, the URL once, and the two places to look."""
    line = _error_line(run("status", "census", "--url", "not-a-url", code=1), 1)
    assert line.count("not-a-url") == 1 and "url argument" not in line
    assert "http://host:port" in line and "PRIVACY_LEDGER_URL or --url" in line


def test_a_server_url_with_a_path_says_to_check_it(run: Cli, census: dict[str, Any]) -> None:
    """A base URL with a path reaches no route: the answer was a bare 'Not Found'."""
    line = _error_line(run("status", "census", "--url", "http://testserver/nope", code=1), 1)
    assert "no such path" in line and "PRIVACY_LEDGER_URL" in line
    # a dataset the server does not have is still named as such
    missing = _error_line(run("status", "no-such-dataset", code=1), 1)
    assert "no-such-dataset" in missing and "no such path" not in missing


@pytest.mark.parametrize("command", ["budget", "status", "release", "commit", "ledger"])
def test_an_id_too_long_for_a_url_is_a_one_line_error(
    run: Cli, census: dict[str, Any], command: str
) -> None:
    line = _error_line(run(command, "x" * 70_000, code=1), 1)
    assert "URL too long" in line and "names and ids" in line


# --- database URLs (migrate, verify, keys create --local) --------------------------------------


def _database_urls(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """id -> (URL, what the error line says)."""
    not_a_db = tmp_path / "notadb.sqlite"
    not_a_db.write_text("this is not a database")
    return {
        "missing-directory": (
            f"sqlite:///{tmp_path}/no/such/dir/x.db",
            "cannot {doing} the database at",
        ),
        "not-a-url": ("nonsense", "'nonsense' is not a database URL"),
        "unknown-dialect": ("nosuchdb://x@h/db", "is not a database URL"),
        "refused": ("postgresql+psycopg://nobody@127.0.0.1:1/x", "Connection refused"),
        "no-driver": ("mysql://x@127.0.0.1/x", "needs the database driver 'MySQLdb'"),
        "not-a-database": (f"sqlite:///{not_a_db}", "file is not a database"),
    }


CASES = ["missing-directory", "not-a-url", "unknown-dialect", "refused", "no-driver", "not-a-database"]  # fmt: skip


def _local(args: list[str], env: dict[str, str]) -> Result:
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(cli, args, env=env)
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    ("args", "doing"),
    [
        (["migrate"], "migrate"),
        (["migrate", "--downgrade", "base"], "migrate"),
        (["verify"], "verify"),
        (["keys", "create", "--role", "viewer", "--local"], "create a key in"),
    ],
    ids=["migrate", "downgrade", "verify", "keys-local"],
)
def test_a_database_url_that_names_nothing_usable_is_a_one_line_error(
    tmp_path: Path, case: str, args: list[str], doing: str
) -> None:
    """migrate called Alembic unguarded: FileNotFoundError (the lock file), ArgumentError,
    OperationalError, ModuleNotFoundError (MySQLdb) and DatabaseError ended in tracebacks."""
    url, says = _database_urls(tmp_path)[case]
    r = _local(args, {"PRIVACY_LEDGER_DATABASE_URL": url})
    line = _error_line(r, 1)
    assert says.format(doing=doing) in line, line
    assert "PRIVACY_LEDGER_DATABASE_URL" in line or "privacy-ledger runs on SQLite" in line


@pytest.mark.parametrize(
    "args",
    [["serve"], ["migrate"], ["verify"], ["keys", "create", "--role", "viewer", "--local"]],
    ids=["serve", "migrate", "verify", "keys-local"],
)
@pytest.mark.parametrize(
    ("setting", "value"),
    [("PRIVACY_LEDGER_ADMIN_KEY", "short"), ("PRIVACY_LEDGER_AUTO_MIGRATE", "maybe")],
)
def test_an_invalid_setting_is_a_one_line_error_naming_it(
    tmp_path: Path, args: list[str], setting: str, value: str
) -> None:
    """The commands that read the server's settings called get_settings unguarded: an invalid
    setting ended in pydantic's traceback and "This is a bug in privacy-ledger" (docs/
    operations.md says the server stops with a message naming the setting)."""
    env = {"PRIVACY_LEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}", setting: value}
    line = _error_line(_local(args, env), 1)
    assert line.startswith("error: invalid configuration: ") and setting in line, line


def test_a_password_in_a_database_url_is_not_shown(tmp_path: Path) -> None:
    r = _local(["migrate", "--database-url", "postgresql+psycopg://u:hunter2@127.0.0.1:1/x"], {})
    assert "Connection refused" in _error_line(r, 1) and "hunter2" not in r.stderr


def test_migrate_still_migrates(tmp_path: Path) -> None:
    r = _local(["migrate", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"], {})
    assert r.exit_code == 0 and "schema at head" in r.stdout, r.stderr


# --- a bug stays visible ----------------------------------------------------------------------


def test_a_bug_shows_its_traceback_and_says_it_is_one(
    run: Cli, census: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handlers above take the classes of errors that are the user's input; anything else
    is a bug: its traceback is shown (without local variables: they hold the API key), then
    one line that says to report it."""

    def broken(data: Any) -> None:
        raise KeyError("spent")

    monkeypatch.setattr(datasets_cli, "print_json", broken)
    r = run("datasets", "--json", code=1)
    assert "Traceback (most recent call last)" in r.stderr and "KeyError: 'spent'" in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: internal error (KeyError: 'spent')"), last
    assert "This is a bug in privacy-ledger" in last and "report it" in last
    assert ADMIN_KEY not in r.stderr


def test_output_cut_short_by_a_pipe_is_not_called_a_bug(
    run: Cli, census: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``privacy-ledger ledger x --format csv | head -1``: typer ends a command whose reader
    went away quietly (exit 1), and the handler of bugs leaves that to it."""

    def closed(data: Any) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(datasets_cli, "print_json", closed)
    r = run("datasets", "--json", code=1)
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


# --- the real command, with bytes that are not UTF-8 in its argv -------------------------------


def test_the_command_with_non_utf8_bytes_in_argv_says_so(tmp_path: Path) -> None:
    """As a process: the bytes reach Python as surrogate escapes (the in-process tests above
    pass those), and the request is never made (the URL is a closed port)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVACY_LEDGER_")}
    env |= {"PRIVACY_LEDGER_URL": "http://127.0.0.1:9", "PRIVACY_LEDGER_API_KEY": ADMIN_KEY}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "client" / "src"), env.get("PYTHONPATH", "")]
    )
    r = subprocess.run(
        [sys.executable.encode(), b"-m", b"app.cli", b"charge", b"\xff", b"--sigma", b"5"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    stderr = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 1 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: an argument is not UTF-8 text")
    assert "byte 0xff" in stderr


@pytest.mark.parametrize(
    ("args", "doing"),
    [
        (["verify"], "verify"),
        (["keys", "create", "--role", "admin", "--local"], "create a key in"),
        (["prune-idempotency", "--older-than-days", "30"], "prune-idempotency"),
    ],
    ids=["verify", "keys-local", "prune"],
)
def test_a_sqlite_file_that_is_not_there_is_named_and_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], doing: str
) -> None:
    """README: "Lost the key? privacy-ledger keys create --role admin --local, run from this
    directory". Run from another one, the default ``sqlite:///./privacy_ledger.db`` made an
    empty file there and answered "no such table: app_setting" about ``./privacy_ledger.db``,
    naming neither the file it had just made nor where the server's is. These commands read an
    existing ledger: a SQLite file that is not there is named by its absolute path, and left
    uncreated (``migrate`` still creates one)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PRIVACY_LEDGER_DATABASE_URL", raising=False)
    r = _local(args, {})
    line = _error_line(r, 1)
    path = tmp_path / "privacy_ledger.db"
    assert f"cannot {doing} the database at sqlite:///./privacy_ledger.db" in line, line
    assert f"no database file at {path}" in line and "PRIVACY_LEDGER_DATABASE_URL" in line
    assert not path.exists()
