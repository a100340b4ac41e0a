"""Spending budget and planning it: ``charge``, ``reserve`` / ``commit`` / ``release``,
``calibrate`` and ``compose`` (over HTTP). Mechanism flags come from the registry of kinds
(``app.cli.mechanism_flags``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from app.accounting.registry import calibration_parameters, kind_names
from app.cli.common import (
    DEFAULT_URL,
    JSON_OUT,
    KEY,
    URL,
    Table,
    choice,
    connect,
    console,
    fail,
    finite,
    load_json,
    num_toward,
    print_json,
    used,
)
from app.cli.mechanism_flags import kind_option, mechanism_from_flags, with_mechanism_flags

DATASET = Annotated[str, typer.Argument(help="Dataset name or id.", metavar="DATASET")]
KIND = Annotated[str, kind_option("gaussian")]
MECHANISM_JSON = Annotated[
    str | None,
    typer.Option(
        "--mechanism-json",
        help='The whole mechanism object as JSON, e.g. \'{"mechanism": "laplace", "epsilon": '
        "0.1}' (instead of --mechanism and its flags).",
        show_default=False,
    ),
]
LABEL = Annotated[
    str | None,
    typer.Option(
        help="Free-text label stored with the entry (e.g. the release's name).", show_default=False
    ),
]
METADATA = Annotated[
    str | None,
    typer.Option(
        help="A JSON object stored with the entry (e.g. '{\"run\": 17}').", show_default=False
    ),
]
ALLOCATION = Annotated[
    str | None,
    typer.Option(
        help="Charge this allocation (team sub-budget) of the dataset; a key limited to "
        "allocations must name one of its own.",
        show_default=False,
    ),
]
BLOCKS = Annotated[
    str | None,
    typer.Option(
        metavar="FROM:TO",
        help="Blocks of a partitioned dataset this release reads, inclusive, e.g. "
        "2026-11-01:2026-11-07 (day), 2026-W45:2026-W48 (ISO week), 2026-09:2026-11 (month); "
        "UTC. Required on partitioned datasets, refused on others.",
        show_default=False,
    ),
]


def block_range(raw: str | None) -> tuple[str, str] | None:
    """``FROM:TO`` (or a single key) -> the (from, to) pair the API takes."""
    if raw is None:
        return None
    first, sep, last = raw.partition(":")
    if not first or (sep and not last):
        fail(f"--blocks must be FROM:TO (e.g. 2026-11-01:2026-11-07), got {raw!r}")
    return first, (last if sep else first)


def dp_event_type(data: Any) -> str | None:
    """The type of a dp_accounting DpEvent given where a mechanism object was expected (its JSON
    ``{"type": "...DpEvent", ...}``, or the dp_event route's body ``{"dp_event": {...}}``), else
    None."""
    if isinstance(data, dict) and "mechanism" not in data:
        inner = data.get("dp_event", data)
        kind = inner.get("type") if isinstance(inner, dict) else None
        if isinstance(kind, str) and kind.endswith("DpEvent"):
            return kind
    return None


def _mechanism(kind: str, raw: str | None, flags: dict[str, str | None]) -> dict[str, Any]:
    if raw is not None:
        if any(v is not None for v in flags.values()):
            fail("give --mechanism-json or mechanism flags, not both")
        parsed = load_json(raw, "--mechanism-json")
        if not isinstance(parsed, dict):
            raise typer.BadParameter("--mechanism-json must be a JSON object")
        if (event := dp_event_type(parsed)) is not None:
            fail(
                f"--mechanism-json holds a dp_accounting {event}, not a mechanism object: "
                "charge it with `privacy-ledger charge-dp-event DATASET FILE` (FILE holding the "
                "event's JSON, - for standard input; --dry-run to only ask)"
            )
        return parsed
    return mechanism_from_flags(kind, flags)


def _metadata(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    parsed = load_json(raw, "--metadata")
    if not isinstance(parsed, dict):
        raise typer.BadParameter("--metadata must be a JSON object")
    return parsed


def _spent(sp: dict[str, Any]) -> str:
    return f"epsilon {used(sp['epsilon'])} at delta {used(sp['delta'])} ({sp['method']})"


def charge(
    dataset: DATASET,
    mechanism: KIND = "gaussian",
    mechanism_json: MECHANISM_JSON = None,
    label: LABEL = None,
    metadata: METADATA = None,
    allocation: ALLOCATION = None,
    blocks: BLOCKS = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Only ask whether it would be admitted (records nothing)."),
    ] = False,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            help="Idempotency-Key header: run the command again with the same key and it is "
            "charged once (default: a fresh key per run).",
            show_default=False,
        ),
    ] = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
    *,
    flags: dict[str, str | None],
) -> None:
    """Charge one mechanism invocation to DATASET (pipeline key; exit 2 when refused for
    budget, and nothing is charged)."""
    m = _mechanism(mechanism, mechanism_json, flags)
    meta = _metadata(metadata)
    span = block_range(blocks)
    replayed = False
    with connect(url, api_key) as s:
        if dry_run:
            answer = s.call(lambda c: c.dry_run(dataset, m, allocation=allocation, blocks=span)).raw
        else:
            charged = s.call(
                lambda c: c.charge(
                    dataset,
                    m,
                    label=label,
                    metadata=meta,
                    idempotency_key=idempotency_key,
                    allocation=allocation,
                    blocks=span,
                )
            )
            answer, replayed = charged.raw, charged.replayed
    print_charge_answer(answer, dry_run=dry_run, replayed=replayed, as_json=as_json)


def print_charge_answer(
    answer: dict[str, Any], *, dry_run: bool, replayed: bool, as_json: bool
) -> None:
    """A charge's answer as ``charge`` prints it: the JSON, the dry run's spend, or the entry
    (or entries, for a batch: ``entries``) recorded and the spend."""
    if as_json:
        print_json(answer)
    elif dry_run:
        console.print(
            f"would be admitted: spend would become {_spent(answer['would_spend'])}; "
            f"now {_spent(answer['spent'])}",
            markup=False,
        )
    else:
        again = (
            " (a retry of this --idempotency-key: the first answer, nothing charged again)"
            if replayed
            else ""
        )
        entries = answer["entries"] if "entries" in answer else [answer["entry"]]
        ids = ", ".join(f"{e['id']} (#{e['seq']})" for e in entries)
        console.print(
            f"recorded as {'entry' if len(entries) == 1 else 'entries'} {ids}{again}; "
            f"spent {_spent(answer['spent'])}",
            markup=False,
        )


def reserve(
    dataset: DATASET,
    mechanism: KIND = "gaussian",
    mechanism_json: MECHANISM_JSON = None,
    ttl: Annotated[
        int,
        typer.Option(
            "--ttl",
            min=1,
            help="Seconds the hold lasts; an expired hold is charged (fail closed).",
        ),
    ] = 600,
    label: LABEL = None,
    metadata: METADATA = None,
    allocation: ALLOCATION = None,
    blocks: BLOCKS = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
    *,
    flags: dict[str, str | None],
) -> None:
    """Hold budget for a planned invocation (pipeline key); then `commit` or `release` it.
    Exit 2 when it does not fit."""
    m = _mechanism(mechanism, mechanism_json, flags)
    meta = _metadata(metadata)
    with connect(url, api_key) as s:
        hold = s.call(
            lambda c: c.reserve(
                dataset,
                m,
                ttl_seconds=ttl,
                label=label,
                metadata=meta,
                allocation=allocation,
                blocks=block_range(blocks),
            )
        )
    answer = hold.reservation.raw
    if as_json:
        print_json(answer)
    else:
        console.print(
            f"reservation {answer['id']} held until {answer['expires_at']}; "
            f"commit: privacy-ledger commit {answer['id']}; "
            f"release: privacy-ledger release {answer['id']}",
            markup=False,
        )


def _resolve_reservation(
    verb: str, reservation_id: str, url: str, api_key: str | None, as_json: bool
) -> None:
    with connect(url, api_key) as s:
        if verb == "commit":
            answer = s.call(lambda c: c.commit(reservation_id)).raw
        else:
            answer = s.call(lambda c: c.release(reservation_id)).raw
    if as_json:
        print_json(answer)
        return
    entry = answer.get("ledger_entry_id")
    console.print(
        f"reservation {answer['id']}: {answer['status']}"
        + (f" (ledger entry {entry})" if entry is not None else ""),
        markup=False,
    )


RESERVATION = Annotated[
    str, typer.Argument(help="Reservation id (from `reserve`).", metavar="RESERVATION_ID")
]


def commit(
    reservation_id: RESERVATION,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Record a held invocation in the ledger (pipeline key; idempotent)."""
    _resolve_reservation("commit", reservation_id, url, api_key, as_json)


def release(
    reservation_id: RESERVATION,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Free a hold: you assert that nothing derived from it was released (the key that made
    the hold, or an admin key)."""
    _resolve_reservation("release", reservation_id, url, api_key, as_json)


_SOLVABLE = sorted({p for params in calibration_parameters().values() for p in params})


def calibrate(
    dataset: DATASET,
    mechanism: KIND = "gaussian",
    parameter: Annotated[
        str | None,
        typer.Option(
            parser=choice(_SOLVABLE, "calibration parameter"),
            metavar="PARAMETER",
            help="The parameter to solve for: "
            + "; ".join(f"{k}: {', '.join(p)}" for k, p in calibration_parameters().items() if p)
            + " (default: the first listed for the kind).",
            show_default=False,
        ),
    ] = None,
    allocation: ALLOCATION = None,
    blocks: BLOCKS = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
    *,
    flags: dict[str, str | None],
) -> None:
    """The least noise (or largest epsilon, most steps) the next invocation may use and still
    fit the budget; the other parameters are fixed by the flags (viewer key). With
    --allocation / --blocks (required on a partitioned dataset): against every limit a charge
    naming them must fit."""
    solvable = calibration_parameters().get(mechanism) or {}
    target = parameter or next(iter(solvable), None)
    if not solvable:
        kinds = ", ".join(k for k, p in calibration_parameters().items() if p)
        fail(f"{mechanism} has no parameter to calibrate (kinds that have one: {kinds})")
    if target not in solvable:
        fail(f"{mechanism} cannot be calibrated for {target} (it can: {', '.join(solvable)})")
    from app.accounting.calibration import refused_input  # (the PLD's scipy.signal)

    body = mechanism_from_flags(mechanism, flags, solve_for=target)
    fixed = {k: v for k, v in body.items() if k != "mechanism"}
    for name in sorted(fixed):  # the flags the server would refuse (422), refused here
        refused = refused_input(mechanism, str(target), name, ask="--parameter {}".format)
        if refused is not None:
            fail(f"--{name.replace('_', '-')}: {refused}")
    with connect(url, api_key) as s:
        answer = s.call(
            lambda c: c.calibrate(
                dataset,
                mechanism,
                target,
                allocation=allocation,
                blocks=block_range(blocks),
                **fixed,
            )
        ).raw
    if as_json:
        print_json(answer)
        return
    after = answer.get("spent_after")
    least = answer.get("direction") == "min"  # a noise: rounded up; an epsilon, steps: down
    console.print(
        f"{answer['parameter']} = {num_toward(answer['value'], up=least)} "
        f"({'least' if least else 'largest'} that fits)",
        markup=False,
    )
    console.print(f"mechanism: {json.dumps(answer['mechanism'])}", markup=False)
    if after:
        console.print(f"spend after charging it: {_spent(after)}", markup=False)


PLAN_EXAMPLE = '[{"mechanism": "gaussian", "sigma": 2.0}, {"mechanism": "laplace", "epsilon": 0.1}]'


def read_json_file(file: Path, what: str) -> tuple[str, Any]:
    """(its name for messages, its JSON) of a file (``-``: standard input), or exit with a
    one-line error naming ``what`` it was to hold."""
    name = "standard input" if str(file) == "-" else str(file)
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        fail(f"cannot read the {what} {name}: {reason}")
    try:
        return name, load_json(text, name)
    except typer.BadParameter as exc:
        fail(exc.message)


def _plan(file: Path) -> list[dict[str, Any]]:
    """The mechanisms of a plan file (``-``: standard input), or exit with a one-line error."""
    name, data = read_json_file(file, "plan")
    if (event := dp_event_type(data)) is not None:
        fail(
            f"{name} holds a dp_accounting {event}, not a list of mechanism objects: for what "
            "it would spend on a dataset, use `privacy-ledger charge-dp-event DATASET FILE "
            "--dry-run`"
        )
    mechanisms = data.get("mechanisms") if isinstance(data, dict) else data
    if not isinstance(mechanisms, list):
        fail(
            f'{name} must hold a list of mechanisms or {{"mechanisms": [...]}}, e.g. {PLAN_EXAMPLE}'
        )
    for i, m in enumerate(mechanisms):
        if (event := dp_event_type(m)) is not None:
            fail(
                f"{name}: item {i} is a dp_accounting {event}, not a mechanism object: compose "
                "takes mechanism objects; for what an event would spend on a dataset, use "
                "`privacy-ledger charge-dp-event DATASET FILE --dry-run`"
            )
        if not isinstance(m, dict) or not isinstance(m.get("mechanism"), str):
            fail(
                f"{name}: item {i} is not a mechanism object (a JSON object with its kind in "
                f'"mechanism", e.g. {{"mechanism": "gaussian", "sigma": 2.0}}): '
                f"{json.dumps(m)[:80]}"
            )
    return mechanisms


def compose(
    file: Annotated[
        Path,
        typer.Argument(
            help="JSON file holding the plan: a list of mechanism objects, each as a charge "
            f'takes it, e.g. {PLAN_EXAMPLE} (or {{"mechanisms": [...]}}); - reads standard '
            "input.",
            allow_dash=True,
            metavar="FILE",
        ),
    ],
    delta: Annotated[
        float, typer.Option(parser=finite, metavar="NUMBER", help="Target delta [probability].")
    ] = 1e-6,
    accounting: Annotated[
        Literal["rdp", "zcdp", "pld"],
        typer.Option(
            help="Composition: rdp (Renyi DP), zcdp, or pld (privacy loss distributions).",
        ),
    ] = "rdp",
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """What-if: the epsilon at DELTA of a fixed list of mechanisms (nothing is recorded). FILE
    is a JSON list of mechanism objects, e.g. [{"mechanism": "gaussian", "sigma": 2.0}]. Every
    candidate conversion is shown; the answer is the least of them."""
    mechanisms = _plan(file)
    with connect(url, api_key) as s:
        answer = s.call(lambda c: c.compose(mechanisms, delta, accounting)).raw
    if as_json:
        print_json({k: v for k, v in answer.items() if k not in ("orders", "rdp")})
        return
    method = answer["method"]
    console.print(
        f"epsilon {used(answer['epsilon'])} at delta {used(answer['delta'])} "
        f"({accounting} accounting, by {method})",
        markup=False,
    )
    table = Table(title="candidate conversions (each a valid bound; the answer is the least)")
    table.add_column("conversion")
    table.add_column("epsilon", justify="right")
    table.add_column("")
    for name, eps in sorted((answer.get("conversions") or {}).items(), key=lambda kv: kv[1]):
        table.add_row(name, used(eps), "<- answer" if name == method else "candidate")
    console.print(table)


def register(cli: typer.Typer) -> None:
    """Add these commands to the top-level app."""
    cli.command("charge")(with_mechanism_flags(charge))
    cli.command("reserve")(with_mechanism_flags(reserve))
    cli.command("commit")(commit)
    cli.command("release")(release)
    cli.command("calibrate")(with_mechanism_flags(calibrate))
    cli.command("compose")(compose)


__all__ = [
    "block_range",
    "calibrate",
    "charge",
    "commit",
    "compose",
    "kind_names",
    "register",
    "release",
    "reserve",
]
