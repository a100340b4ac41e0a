"""Charging releases described by other DP libraries: ``charge-dp-event`` (a dp_accounting
``DpEvent`` as JSON) and ``charge-opacus`` (an Opacus accountant's history), over HTTP. Both
follow ``charge``: the same options, output and exit codes (2: refused for budget, nothing
charged). An OpenDP measurement is Python code, so it has no command: the client's
``charge_opendp`` charges it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from privacy_ledger_client import opacus_dp_event

from app.cli.charging import (
    DATASET,
    LABEL,
    METADATA,
    _metadata,
    print_charge_answer,
    read_json_file,
)
from app.cli.common import (
    DEFAULT_URL,
    JSON_OUT,
    KEY,
    URL,
    connect,
    fail,
    load_json,
)

DRY_RUN = Annotated[
    bool,
    typer.Option("--dry-run", help="Only ask whether it would be admitted (records nothing)."),
]
IDEMPOTENCY_KEY = Annotated[
    str | None,
    typer.Option(
        help="Idempotency-Key header: run the command again with the same key and it is "
        "charged once (default: a fresh key per run).",
        show_default=False,
    ),
]
EVENT_EXAMPLE = (
    '{"type": "SelfComposedDpEvent", "event": {"type": "GaussianDpEvent", "noise_multiplier": '
    '2.0}, "count": 10}'
)
HISTORY_EXAMPLE = "[[1.1, 0.01, 1000], [0.9, 0.01, 500]]"


def _charge_event(
    dataset: str,
    event: dict[str, Any],
    *,
    label: str | None,
    metadata: str | None,
    dry_run: bool,
    idempotency_key: str | None,
    url: str,
    api_key: str | None,
    as_json: bool,
    history: list[tuple[Any, ...]] | None = None,
) -> None:
    """Charge (or dry-run) one DpEvent, ``history`` being the Opacus history it was made from
    (the client then names ``history[i]`` in a refusal); output as ``charge``'s."""
    meta = _metadata(metadata)
    replayed = False
    with connect(url, api_key) as s:
        if dry_run:
            if history is not None:
                answer = s.call(lambda c: c.charge_opacus(dataset, history, dry_run=True)).raw
            else:
                answer = s.call(lambda c: c.charge_dp_event(dataset, event, dry_run=True)).raw
        else:
            kw: dict[str, Any] = {
                "label": label,
                "metadata": meta,
                "idempotency_key": idempotency_key,
            }
            if history is not None:
                charged = s.call(lambda c: c.charge_opacus(dataset, history, **kw))
            else:
                charged = s.call(lambda c: c.charge_dp_event(dataset, event, **kw))
            answer, replayed = charged.raw, charged.replayed
    print_charge_answer(answer, dry_run=dry_run, replayed=replayed, as_json=as_json)


def charge_dp_event(
    dataset: DATASET,
    file: Annotated[
        Path,
        typer.Argument(
            help="JSON file holding the DpEvent as privacy_ledger_client.dp_event_to_dict "
            f"writes it, e.g. {EVENT_EXAMPLE} (or the API's body, "
            '{"dp_event": {...}}); - reads standard input.',
            allow_dash=True,
            metavar="FILE",
        ),
    ],
    label: LABEL = None,
    metadata: METADATA = None,
    dry_run: DRY_RUN = False,
    idempotency_key: IDEMPOTENCY_KEY = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Charge a dp_accounting DpEvent to DATASET: one entry per mechanism it translates to,
    all admitted together or none (pipeline key; exit 2 when refused for budget, and nothing
    is charged). GET /v1/mechanisms lists the event types translated."""
    name, data = read_json_file(file, "DpEvent")
    if isinstance(data, dict) and "type" not in data and isinstance(data.get("dp_event"), dict):
        if set(data) - {"dp_event", "label", "metadata"}:
            fail(f"{name}: an API body holds dp_event, label and metadata only")
        label = label if label is not None else data.get("label")
        if metadata is None and data.get("metadata") is not None:
            metadata = json.dumps(data["metadata"])
        data = data["dp_event"]
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        fail(
            f'{name} must hold a DpEvent as JSON (an object with its class name in "type"), '
            f"e.g. {EVENT_EXAMPLE}"
        )
    _charge_event(
        dataset,
        data,
        label=label,
        metadata=metadata,
        dry_run=dry_run,
        idempotency_key=idempotency_key,
        url=url,
        api_key=api_key,
        as_json=as_json,
    )


def charge_opacus(
    dataset: DATASET,
    history: Annotated[
        str | None,
        typer.Option(
            help="The accountant's history as JSON: a list of [noise_multiplier, sample_rate, "
            f"steps], e.g. '{HISTORY_EXAMPLE}' (Opacus RDPAccountant.history).",
            show_default=False,
        ),
    ] = None,
    history_file: Annotated[
        Path | None,
        typer.Option(
            help="A JSON file holding the history instead (- reads standard input).",
            allow_dash=True,
            show_default=False,
        ),
    ] = None,
    label: LABEL = None,
    metadata: METADATA = None,
    dry_run: DRY_RUN = False,
    idempotency_key: IDEMPOTENCY_KEY = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Charge an Opacus training run to DATASET from its accountant's history: each
    [noise_multiplier, sample_rate, steps] is that many Poisson-subsampled Gaussian steps, all
    admitted together or none (pipeline key; exit 2 when refused for budget, and nothing is
    charged)."""
    if (history is None) == (history_file is None):
        fail(f"give --history '{HISTORY_EXAMPLE}' or --history-file FILE (one of them)")
    if history_file is not None:
        name, data = read_json_file(history_file, "Opacus history")
    else:
        name, data = "--history", load_json(str(history), "--history")
    if not isinstance(data, list) or not all(isinstance(x, list) for x in data):
        fail(
            f"{name} must hold a list of [noise_multiplier, sample_rate, steps], "
            f"e.g. {HISTORY_EXAMPLE}"
        )
    steps = [tuple(x) for x in data]
    try:
        event = opacus_dp_event(steps)
    except ValueError as exc:
        fail(f"{name}: {exc}")
    _charge_event(
        dataset,
        event,
        label=label,
        metadata=metadata,
        dry_run=dry_run,
        idempotency_key=idempotency_key,
        url=url,
        api_key=api_key,
        as_json=as_json,
        history=steps,
    )


def register(cli: typer.Typer) -> None:
    """Add these commands to the top-level app."""
    cli.command("charge-dp-event")(charge_dp_event)
    cli.command("charge-opacus")(charge_opacus)


__all__ = ["charge_dp_event", "charge_opacus", "register"]
