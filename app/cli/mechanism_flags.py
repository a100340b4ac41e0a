"""Mechanism flags derived from the registry of kinds (``app.accounting.registry``).

Every parameter any kind declares becomes one flag (``sample_rate`` -> ``--sample-rate``), with
help written from the kinds that use it: their help line, unit and type. A value is read as
text and typed for the chosen kind, so ``--sensitivity 1`` is the integer 1 for
``discrete_laplace`` and the number 1.0 for ``gaussian``; list parameters (``rdp``'s
``--orders`` and ``--epsilons``) take comma-separated numbers. A flag the chosen kind does not
have, a missing required one, or a value of the wrong type is refused before anything is sent.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from app.accounting.kinds import Param
from app.accounting.registry import kind_names, spec
from app.cli.common import choice, finite

_UNITLESS = {
    "epsilon": "nats (natural-log privacy loss)",
    "epsilons": "nats, one per order",
    "rho": "nats (zCDP)",
    "xi": "nats",
    "delta": "probability",
    "sample_rate": "probability per record per step",
    "orders": "Renyi orders alpha > 1, dimensionless",
    "count": "repetitions",
    "steps": "steps",
    "k": "categories",
}


def _unit(p: Param) -> str:
    return p.unit or _UNITLESS.get(p.name, "")


def _shape(p: Param) -> str:
    if p.type == "int":
        return "integer"
    if p.type == "float_list":
        return "comma-separated numbers"
    return "number"


def _declared() -> dict[str, list[tuple[str, Param]]]:
    """Parameter name -> [(kind, its Param)], in registry order."""
    found: dict[str, list[tuple[str, Param]]] = {}
    for kind in kind_names():
        for p in spec(kind).params:
            found.setdefault(p.name, []).append((kind, p))
    return found


DECLARED = _declared()
FLAG_NAMES = tuple(n for n in DECLARED if n != "count") + ("count",)


def flag_help(name: str) -> str:
    """One help text for a flag: its unit and type, then what it means for each kind that
    declares it."""
    units: dict[str, None] = {}
    texts: dict[str, list[str]] = {}
    for kind, p in DECLARED[name]:
        unit = _unit(p)
        units[f"{unit}, {_shape(p)}" if unit else _shape(p)] = None
        texts.setdefault(p.cli_help or p.help, []).append(kind)
    if name == "count":
        return f"{next(iter(texts))} [{'; '.join(units)}; every kind; default 1]"
    meanings = "; ".join(f"{', '.join(kinds)}: {text.rstrip('.')}" for text, kinds in texts.items())
    return f"[{'; '.join(units)}] {meanings}."


def _metavar(name: str) -> str:
    shapes = {_shape(p) for _, p in DECLARED[name]}
    if shapes == {"integer"}:
        return "INT"
    if shapes == {"comma-separated numbers"}:
        return "LIST"
    return "NUMBER"


KIND_HELP = "Mechanism kind: " + "; ".join(
    f"{k} ({spec(k).description.rstrip('.')})" for k in kind_names()
)


def kind_option(default: str | None) -> Any:
    return typer.Option(
        "--mechanism",
        "-m",
        parser=choice(kind_names(), "mechanism kind"),
        metavar="KIND",
        help=KIND_HELP,
        show_default=default is not None,
    )


def with_mechanism_flags(fn: Callable[..., Any], skip: tuple[str, ...] = ()) -> Callable[..., Any]:
    """``fn`` with one keyword option per registry parameter added to its signature; ``fn``
    receives them together as ``flags: dict[str, str | None]``."""
    names = [n for n in FLAG_NAMES if n not in skip]
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "flags"]
    added = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[
                str | None,
                typer.Option(
                    "--" + name.replace("_", "-"),
                    help=flag_help(name),
                    metavar=_metavar(name),
                    show_default=False,
                ),
            ],
        )
        for name in names
    ]

    def command(**kwargs: Any) -> Any:
        flags = {n: kwargs.pop(n) for n in names}
        return fn(**kwargs, flags=flags)

    command.__name__ = fn.__name__
    command.__doc__ = fn.__doc__
    command.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[*own, *added]
    )
    return command


def _typed(kind: str, p: Param, raw: str) -> Any:
    flag = "--" + p.name.replace("_", "-")

    def number(text: str) -> float:
        try:
            return finite(text)
        except typer.BadParameter as exc:
            raise typer.BadParameter(f"{flag} for {kind}: {exc.message}") from None

    if p.type == "int":
        v = number(raw)
        if not v.is_integer():
            raise typer.BadParameter(f"{flag} takes an integer for {kind}, got {raw!r}")
        return int(v)
    if p.type == "float_list":
        items = [s.strip() for s in raw.split(",") if s.strip()]
        if not items:
            raise typer.BadParameter(f"{flag} takes comma-separated numbers, got {raw!r}")
        return [number(s) for s in items]
    return number(raw)


def mechanism_from_flags(
    kind: str, flags: dict[str, str | None], solve_for: str | None = None
) -> dict[str, Any]:
    """The mechanism object for ``kind`` from the flags given, each typed as the kind declares
    it. ``solve_for``: a parameter calibration will choose (not required here)."""
    s = spec(kind)
    params = {p.name: p for p in s.params}
    body: dict[str, Any] = {"mechanism": kind}
    for name, raw in flags.items():
        if raw is None:
            continue
        p = params.get(name)
        if p is None:
            own = ", ".join("--" + n.replace("_", "-") for n in params)
            raise typer.BadParameter(
                f"--{name.replace('_', '-')} does not apply to {kind} (its flags: {own})"
            )
        body[name] = _typed(kind, p, raw)
    missing = [
        "--" + p.name.replace("_", "-")
        for p in s.params
        if p.required and p.name not in body and p.name != solve_for
    ]
    if missing:
        raise typer.BadParameter(f"{kind} needs {', '.join(missing)}")
    if s.one_of and solve_for is None and not any(n in body for g in s.one_of for n in g):
        forms = " or ".join(" + ".join("--" + n.replace("_", "-") for n in g) for g in s.one_of)
        raise typer.BadParameter(f"{kind} needs {forms}")
    return body


__all__ = [
    "FLAG_NAMES",
    "KIND_HELP",
    "flag_help",
    "kind_option",
    "mechanism_from_flags",
    "with_mechanism_flags",
]
