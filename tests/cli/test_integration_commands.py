"""``charge-dp-event`` and ``charge-opacus``: the client's integrations from the command line
(audit 43, F1), with ``charge``'s options, output and exit codes. What each records is checked
against the translation built independently by dp_accounting's own event classes and the
client's helpers; spends against the server's own dry run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dp_accounting import dp_event as de
from privacy_ledger_client import dp_event_to_dict, opacus_dp_event

from app.accounting.dp_events import translate
from app.cli import cli
from tests.cli.conftest import Cli
from tests.conftest import ADMIN_KEY

EVENT = de.ComposedDpEvent(
    [
        de.SelfComposedDpEvent(de.GaussianDpEvent(20.0), 3),
        de.LaplaceDpEvent(50.0),
    ]
)


def _dataset(run: Cli, name: str, epsilon: str = "1") -> dict[str, Any]:
    created: dict[str, Any] = run.json(
        "datasets", "create", name, "--epsilon", epsilon, "--delta", "1e-6", "--no-adaptive"
    )
    return created


def _recorded(run: Cli, name: str) -> list[dict[str, Any]]:
    entries = sorted(run.json("ledger", name), key=lambda e: e["seq"])
    return [{k: v for k, v in e["mechanism"].items() if k != "v"} for e in entries]


def _write(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "input.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_charge_dp_event_from_a_file_records_its_mechanisms(run: Cli, tmp_path: Path) -> None:
    _dataset(run, "events")
    file = _write(tmp_path, dp_event_to_dict(EVENT))
    dry = run.json("charge-dp-event", "events", file, "--dry-run")
    assert dry["admitted"] and run.json("budget", "events")["entries"] == 0
    r = run("charge-dp-event", "events", file, "--label", "run 1", "--idempotency-key", "k-1")
    assert r.stdout.startswith("recorded as entries ") and "spent epsilon" in r.stdout
    expected = [m.to_dict() for m in translate(dp_event_to_dict(EVENT))]
    assert _recorded(run, "events") == expected
    spent = run.json("budget", "events")["spent"]["epsilon"]
    assert spent == dry["would_spend"]["epsilon"]
    # the same key again: the first answer, nothing charged again
    again = run("charge-dp-event", "events", file, "--label", "run 1", "--idempotency-key", "k-1")
    assert "nothing charged again" in again.stdout
    assert run.json("budget", "events")["entries"] == len(expected)


def test_charge_dp_event_reads_standard_input_and_the_api_body(run: Cli) -> None:
    _dataset(run, "stdin")
    body = {"dp_event": dp_event_to_dict(de.GaussianDpEvent(30.0)), "label": "from the API"}
    env = {"PRIVACY_LEDGER_URL": "http://testserver", "PRIVACY_LEDGER_API_KEY": ADMIN_KEY}
    r = run.runner.invoke(
        cli, ["charge-dp-event", "stdin", "-", "--json"], input=json.dumps(body), env=env
    )
    assert r.exit_code == 0, r.stderr
    (entry,) = json.loads(r.stdout)["entries"]
    assert entry["label"] == "from the API"
    assert entry["mechanism"]["sigma"] == 30.0


def test_charge_dp_event_refusals_follow_charge(run: Cli, tmp_path: Path) -> None:
    _dataset(run, "small", epsilon="0.5")
    big = _write(tmp_path, dp_event_to_dict(de.LaplaceDpEvent(1.0)))  # epsilon 1 > 0.5
    r = run("charge-dp-event", "small", big, code=2)
    assert "over budget" in r.stderr and "nothing was charged" in r.stderr
    assert run("charge-dp-event", "small", big, "--dry-run", code=2).stdout == ""
    # an event with no translation: the server's 422, exit 1
    r = run("charge-dp-event", "small", _write(tmp_path, {"type": "NonPrivateDpEvent"}), code=1)
    assert "NonPrivateDpEvent has no translation" in r.stderr
    # not an event at all
    r = run("charge-dp-event", "small", _write(tmp_path, [1, 2]), code=1)
    assert "must hold a DpEvent" in r.stderr
    assert run.json("budget", "small")["entries"] == 0


def test_charge_opacus_from_the_option_and_a_file(run: Cli, tmp_path: Path) -> None:
    _dataset(run, "sgd", epsilon="8")
    history = [[1.1, 0.01, 200], [1.3, 0.02, 50]]
    dry = run.json("charge-opacus", "sgd", "--history", json.dumps(history), "--dry-run")
    assert run.json("budget", "sgd")["entries"] == 0
    r = run("charge-opacus", "sgd", "--history-file", _write(tmp_path, history), "--label", "e1")
    assert r.stdout.startswith("recorded as entries ")
    expected = [m.to_dict() for m in translate(opacus_dp_event([tuple(h) for h in history]))]
    assert _recorded(run, "sgd") == expected
    assert run.json("budget", "sgd")["spent"]["epsilon"] == dry["would_spend"]["epsilon"]


def test_charge_opacus_errors_name_the_history_entry(run: Cli) -> None:
    _dataset(run, "sgd-bad", epsilon="8")
    r = run("charge-opacus", "sgd-bad", "--history", "[[1.0, 0.01, 10], [1.0, 1.5, 10]]", code=1)
    assert "history[1]: sample_rate 1.5 is above 1" in r.stderr
    # a range only the server knows: named by the client from the problem's event_path
    r = run("charge-opacus", "sgd-bad", "--history", "[[1.0, 0.01, 10], [1e-4, 0.01, 10]]", code=1)
    assert "Opacus history[1] (noise_multiplier=0.0001" in r.stderr
    r = run("charge-opacus", "sgd-bad", "--history", "[[0.5, 0.5, 100000]]", code=2)
    assert "over budget" in r.stderr
    r = run("charge-opacus", "sgd-bad", code=1)
    assert "--history" in r.stderr and "--history-file" in r.stderr
    # audit 47: an integer beyond the float range was an OverflowError traceback ("internal
    # error ... This is a bug in privacy-ledger")
    r = run("charge-opacus", "sgd-bad", "--history", f"[[1{'0' * 400}, 0.01, 10]]", code=1)
    assert "history[0]: noise_multiplier must be finite" in r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert run.json("budget", "sgd-bad")["entries"] == 0


def test_a_dp_event_given_as_a_mechanism_says_to_use_charge_dp_event(
    run: Cli, tmp_path: Path
) -> None:
    """It said "mechanism: Unable to extract tag using discriminator 'mechanism'"."""
    _dataset(run, "census")
    event = json.dumps(dp_event_to_dict(de.GaussianDpEvent(2.0)))
    for raw in (event, json.dumps({"dp_event": json.loads(event)})):
        r = run("charge", "census", "--mechanism-json", raw, code=1)
        assert "charge-dp-event" in r.stderr and "GaussianDpEvent" in r.stderr
        assert "discriminator" not in r.stderr
    for plan in ([json.loads(event)], json.loads(event)):
        r = run("compose", _write(tmp_path, plan), code=1)
        assert "charge-dp-event" in r.stderr and "GaussianDpEvent" in r.stderr
    assert run.json("budget", "census")["entries"] == 0
