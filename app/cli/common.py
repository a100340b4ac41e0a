"""What every client command shares: the server and key options, the client, error reporting and
number formatting.

Client commands talk to a running server through ``privacy_ledger_client``. The server is
``--url`` (else ``PRIVACY_LEDGER_URL``, else http://127.0.0.1:8000) and the key ``--api-key``
(else ``PRIVACY_LEDGER_API_KEY``); an error names both, so a person knows what to set.
"""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, Concatenate, NoReturn, ParamSpec, TypeVar

import httpx
import typer
from privacy_ledger_client import (
    DEFAULT_URL,
    BudgetExceeded,
    Forbidden,
    HTTPStatusError,
    LedgerClient,
    LedgerError,
    NotFound,
    TransportError,
    Unauthorized,
)
from rich import console as rich_console
from rich import table as rich_table
from rich import text as rich_text
from rich.console import Console
from rich.measure import Measurement

URL_ENV = "PRIVACY_LEDGER_URL"
KEY_ENV = "PRIVACY_LEDGER_API_KEY"

EXIT_ERROR = 1
EXIT_OVER_BUDGET = 2
"""Exit status of a charge, reservation or dry run refused for budget (nothing charged)."""

URL = Annotated[
    str,
    typer.Option(
        "--url",
        envvar=URL_ENV,
        help="Base URL of the privacy-ledger server.",
    ),
]
KEY = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar=KEY_ENV,
        show_default=False,
        help="API key (a secret; prefer the environment variable to the flag).",
    ),
]
JSON_ASKED: ContextVar[bool] = ContextVar("json_asked", default=False)
"""Whether the running command was given ``--json``: then an error answer's problem document
is printed on stdout as well (the root command resets it before each command)."""


def _asked_json(value: bool) -> bool:
    JSON_ASKED.set(bool(value))
    return value


JSON_OUT = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the server's answer as JSON (for scripts; an error answer's problem "
        "document too, on stdout, beside the message on stderr and the exit code).",
        callback=_asked_json,
    ),
]

console = Console(highlight=False, soft_wrap=True)
"""Sentences are not wrapped by rich (``soft_wrap``): the terminal wraps them, and a command
they hold (``privacy-ledger release rsv_...``) copies back whole; tables are laid out by
``Table``."""
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


class Table(rich_table.Table):
    """A rich ``Table`` whose cells are never cut short, nor split where that can be helped:

    * when the output is not a terminal (a pipe, a file) the table takes its natural width
      instead of rich's default of 80 columns, so every row stays one line;
    * on a terminal too narrow for it, a table with a header shows each row as a record, one
      line per column (as psql's expanded display): a newcomer's 80 columns showed "0.67441"
      with its "9" on the next line, which reads as a complete, smaller epsilon;
    * what still does not fit folds onto more lines instead of ending with an ellipsis, which
      turned an epsilon of 1.11e-15 into "1.1102..."."""

    def add_column(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(*args, **kwargs)

    def __rich_console__(
        self, console: rich_console.Console, options: rich_console.ConsoleOptions
    ) -> rich_console.RenderResult:
        natural = Measurement.get(console, options.update(max_width=10_000), self).maximum
        if not console.is_terminal:
            options = options.update(max_width=max(options.max_width, natural))
        elif natural > options.max_width and self.show_header and self.row_count:
            yield from self._records(console, options)
            return
        yield from super().__rich_console__(console, options)

    def _records(
        self, console: rich_console.Console, options: rich_console.ConsoleOptions
    ) -> rich_console.RenderResult:
        """Each row as a two-column table (column name, value) under the table's title."""
        if self.title:
            yield rich_text.Text(str(self.title), style="italic")
        columns = [(str(c.header), list(c.cells)) for c in self.columns]
        for i in range(self.row_count):
            if i:
                yield rich_text.Text("")
            record = rich_table.Table(show_header=False, box=None, padding=(0, 1))
            record.add_column(style="bold", no_wrap=True)
            record.add_column(overflow="fold")
            for header, cells in columns:
                record.add_row(header, cells[i])
            yield from console.render(record, options)


TRANSPORT: httpx.BaseTransport | None = None
"""A transport for every client this module makes (None: real HTTP). Tests set it to reach an
application in the same process."""

T = TypeVar("T")
P = ParamSpec("P")


def choice(values: list[str], what: str) -> Callable[[str], str]:
    """A typer ``parser`` that accepts one of ``values`` (for choices known only at run time,
    such as the registry's mechanism kinds)."""

    def parse(value: str) -> str:
        if value not in values:
            raise typer.BadParameter(f"{value!r} is not a {what}; one of: {', '.join(values)}")
        return value

    return parse


def finite(value: str | float) -> float:
    """A typer ``parser`` for a number option: a finite float. ``nan``, ``inf`` and numbers
    beyond the float range (``1e400``) are refused before anything is sent: no JSON number
    holds them, so the client could not send them (it failed with a traceback)."""
    try:
        number = float(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise typer.BadParameter(f"must be a finite number, got {value!r}")
    return number


NEW_EPSILON = Annotated[
    float | None,
    typer.Option(
        parser=finite, metavar="NUMBER", help="New budget epsilon [nats].", show_default=False
    ),
]
"""``--epsilon`` of a command that changes a budget (a dataset's, an allocation's)."""
NEW_DELTA = Annotated[
    float | None,
    typer.Option(
        parser=finite, metavar="NUMBER", help="New budget delta [probability].", show_default=False
    ),
]
"""``--delta`` of a command that changes a budget."""


def load_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON the server can be sent, else ``typer.BadParameter`` naming
    ``what`` (the option) and why: not JSON; ``NaN``, ``Infinity`` or a number beyond the float
    range (``1e400``), which JSON has no number for; nesting deeper than the parser goes; a
    string that is not text (a lone surrogate such as ``"\\ud800"``, bytes that were not UTF-8,
    or NUL, which the server refuses in stored text)."""

    def constant(name: str) -> float:
        raise ValueError(f"{name} is not a JSON number")

    def number(literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):
            raise ValueError(f"{literal} is beyond the range of a JSON number (a float)")
        return value

    try:
        data = json.loads(text, parse_constant=constant, parse_float=number)
    except RecursionError:
        raise typer.BadParameter(f"{what} is nested too deeply to be read") from None
    except ValueError as exc:
        raise typer.BadParameter(f"{what} is not JSON: {exc}") from None
    from app.api.safe_text import find_unsafe  # (loads FastAPI: only for JSON arguments)

    unsafe = find_unsafe(data, "$")
    if unsafe:
        raise typer.BadParameter(f"{what}: {unsafe}")
    return data


def characters(text: str) -> str:
    """Characters for a message: ``U+00E9 'é'``, or ``byte 0xff`` for a byte of an argument that
    was not UTF-8 (Python keeps it as a lone surrogate, U+DC80-U+DCFF)."""
    return ", ".join(
        f"byte 0x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else f"U+{ord(c):04X} {c!r}"
        for c in dict.fromkeys(text)
    )


def unsendable(exc: UnicodeEncodeError) -> str:
    """Why a request could not be made of the text given (the command's arguments)."""
    bad = characters(exc.object[exc.start : exc.end])
    if exc.encoding == "ascii":  # a header: the API key is checked before, so the other one
        return (
            f"--idempotency-key holds {bad}: it is sent as an HTTP header, which takes "
            "printable ASCII only"
        )
    return (
        f"an argument is not UTF-8 text (it holds {bad}): names, ids, labels and other text "
        "sent to the server must be UTF-8"
    )


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    err_console.print(f"error: {message}", markup=False, soft_wrap=True)
    raise typer.Exit(code=code)


@contextmanager
def connect(url: str, api_key: str | None, timeout: float = 30.0) -> Iterator[Session]:
    """A client for one command (``timeout``: seconds per request); refuses to start without a
    key."""
    if not api_key:
        fail(
            f"no API key: set {KEY_ENV}=<key> or pass --api-key. An admin creates keys with "
            "`privacy-ledger keys create`; a new server prints its first admin key at start-up."
        )
    odd = [c for c in api_key if not (c.isascii() and c.isprintable())]
    if odd:  # (only the odd characters are named: the key is a secret)
        fail(
            f"the API key in {KEY_ENV} / --api-key holds {characters(''.join(odd))}, which no "
            "key has (keys are printable ASCII): check its value"
        )
    try:
        client = LedgerClient(
            url or DEFAULT_URL, api_key, timeout=timeout, retries=2, transport=TRANSPORT
        )
    except (httpx.InvalidURL, ValueError):  # (UnicodeError is a ValueError)
        # (the client names where the URL came from as "the url argument", which is what the
        # CLI passes for PRIVACY_LEDGER_URL too: not repeated here)
        fail(
            f"{url!r} is not a server URL: it must look like http://host:port or https://host; "
            f"check {URL_ENV} or --url"
        )
    with client:
        yield Session(client)


class Session:
    """The client of one command and ``call``, which turns every failure into a clear message."""

    def __init__(self, client: LedgerClient) -> None:
        self.client = client

    def call(
        self, fn: Callable[Concatenate[LedgerClient, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``fn(client, *args, **kwargs)``; a failure exits with a message: the server's
        refusal, or a request that cannot be made of the arguments given (a URL too long for
        httpx, text that is not UTF-8 or a header that is not ASCII)."""
        try:
            return fn(self.client, *args, **kwargs)
        except LedgerError as exc:
            if isinstance(exc, HTTPStatusError) and JSON_ASKED.get():
                # a script reads the refusal's fields (spent, budget, requested, limit...) from
                # stdout, the message and the exit code stay as without --json
                print_json({"status": exc.status, **exc.problem})
            explain(exc, self.client.url)
        except httpx.InvalidURL as exc:
            fail(
                f"the request's URL is not valid ({exc}): check the names and ids given, and "
                f"{URL_ENV} or --url"
            )
        except UnicodeEncodeError as exc:
            fail(unsendable(exc))

    def dataset_id(self, ref: str) -> str:
        """The id of a dataset given by name or id."""
        return self.call(lambda c: c.dataset(ref)).id


def explain(exc: LedgerError, url: str) -> NoReturn:
    """Exit with a message that says what went wrong and which setting to look at."""
    if isinstance(exc, TransportError):
        fail(f"cannot reach the server at {url} ({exc.detail}); check {URL_ENV} or --url.")
    if isinstance(exc, Unauthorized):
        fail(f"the server refused the API key: {exc.detail}. Check {KEY_ENV} or --api-key.")
    if isinstance(exc, Forbidden):
        fail(
            f"{exc.detail} (the key in {KEY_ENV} / --api-key lacks the role or dataset scope "
            "for this command)."
        )
    if isinstance(exc, BudgetExceeded):
        fail(over_budget(exc), EXIT_OVER_BUDGET)
    if isinstance(exc, NotFound):
        if exc.detail == "Not Found":  # no route (the API names what it did not find)
            fail(
                f"the server at {url} has no such path: check that {URL_ENV} or --url is the "
                "server's base URL (http://host:port, without a path)"
            )
        fail(f"{exc.detail} (at {url})")
    fail(exc.detail or str(exc))


def over_budget(exc: BudgetExceeded) -> str:
    """The refusal in one paragraph: what was spent, what it would become, the budget.

    A plain dataset's refusal names its budget. On a partitioned dataset (the problem carries
    ``blocks`` or ``lifetime_budget``) ``spent`` composes all its charges and ``budget`` applies
    to each block, so both budgets are named as such, the lifetime budget (or its absence)
    beside the budget per block; a refusal by an allocation names the allocation's budget. The
    limits that refused (the problem's ``limits``) come first, marked exceeded."""
    p = exc.problem
    limits = [x for x in p.get("limits") or [exc.limit] if isinstance(x, str)]
    partitioned = p.get("blocks") is not None or p.get("lifetime_budget") is not None
    budgets = _budgets(exc, limits, partitioned)
    detail = (exc.detail or "").removeprefix("refused: ")
    parts = [f"refused, over budget (nothing was charged or held): {detail}"]
    whose = "dataset " if "allocation" in budgets else ""
    composed = ", all charges composed" if partitioned else ""
    if exc.spent is not None:
        parts.append(
            f"{whose}spent epsilon {used(exc.spent.epsilon)} at delta "
            f"{used(exc.spent.delta)}{composed}"
        )
    if exc.would_spend is not None:
        after = exc.would_spend.epsilon
        parts.append(
            f"{whose}would become {used(after)}{composed}"
            if after is not None
            else f"{whose}would have no finite epsilon (the entries' own deltas would reach "
            "the delta)"
        )
    parts += [budgets[k] for k in limits if k in budgets]
    parts += [text for k, text in budgets.items() if k not in limits]
    return "; ".join(parts)


def _budgets(exc: BudgetExceeded, limits: list[str], partitioned: bool) -> dict[str, str]:
    """The budgets a refusal names, by limit (``dataset``, ``lifetime``, ``allocation``)."""
    p = exc.problem
    named: dict[str, str] = {}
    a = p.get("allocation")
    if "allocation" in limits and isinstance(a, dict) and isinstance(a.get("budget"), dict):
        b = a["budget"]
        per = " per block" if partitioned else ""
        composed = " (all its charges composed)" if partitioned else ""
        named["allocation"] = (
            f"allocation {a.get('name')!r} spent epsilon {used(a.get('spent_epsilon'))}"
            f"{composed}, budget{per} epsilon {left(b['epsilon'])}, delta {left(b['delta'])}"
            f"{_exceeded(p.get('allocation_blocks_exceeded') or [])}"
        )
    whose = "dataset budget" if named else "budget"
    if exc.budget is not None:
        text = f"epsilon {left(exc.budget.epsilon)}, delta {left(exc.budget.delta)}"
        if not partitioned:
            named["dataset"] = f"{whose} {text}"
        else:
            exceeded = _exceeded(exc.blocks_exceeded) if "dataset" in limits else ""
            named["dataset"] = f"{whose} per block {text}{exceeded}"
    if partitioned:
        life = p.get("lifetime_budget")
        named["lifetime"] = (
            f"lifetime budget epsilon {left(life['epsilon'])}, delta {left(life['delta'])}"
            + (" (exceeded)" if "lifetime" in limits else "")
            if isinstance(life, dict)
            else "no lifetime budget"
        )
    return named


def _exceeded(blocks: list[str]) -> str:
    return f" (exceeded in {', '.join(blocks)})" if blocks else " (exceeded)"


def num(x: float | int | None, digits: int = 6) -> str:
    """A number for people: ``-`` for none, ``inf``, else ``digits`` significant figures."""
    if x is None:
        return "-"
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return "inf"
    return f"{x:.{digits}g}"


def num_toward(x: float | int, up: bool, digits: int = 8) -> str:
    """``x`` to ``digits`` significant figures rounded toward safety, for a calibrated value
    a user may type back in: up (a noise, a scale) or down (an epsilon, steps), so that the
    number printed, read as a float, is never on the costly side of ``x``. Rounding to
    nearest printed sigma 6.9645235 for 6.964523520339923, which a charge refused."""
    if isinstance(x, int) or not math.isfinite(x):
        return num(x, digits)
    nearest = f"{x:.{digits}g}"
    if (float(nearest) >= x) if up else (float(nearest) <= x):
        return nearest
    # the decimal to ``digits`` figures on the safe side of x's exact value; the float it
    # reads as is on that side too (x is a float between them)
    rounding = decimal.ROUND_CEILING if up else decimal.ROUND_FLOOR
    safe = decimal.Context(prec=digits, rounding=rounding).plus(decimal.Decimal(x))
    return f"{float(safe):.{digits}g}"


def _shown(x: float | int | None, up: bool) -> str:
    """``num``'s 6 figures rounded toward safety (``num_toward``), except that a value within
    one part in 10^9 of its nearest 6-figure decimal is shown as that decimal: a float sum such
    as 0.3 x 4 = 1.2000000000000002 (already an upper bound of the exact 1.2) reads 1.2, not
    1.20001, while 0.1234449 spent never reads 0.123444."""
    if x is None or isinstance(x, int) or not math.isfinite(x):
        return num(x)
    nearest = num(x)
    if abs(float(nearest) - x) <= 1e-9 * abs(x):
        return nearest
    return num_toward(x, up=up, digits=6)


def used(x: float | int | None) -> str:
    """A spend for people: 6 figures, never shown below what it is (``_shown``)."""
    return _shown(x, up=True)


def left(x: float | int | None) -> str:
    """What remains, for people: 6 figures, never shown above what it is (``_shown``)."""
    return _shown(x, up=False)


def uses_rho(filter_name: str | None) -> bool:
    """Whether the dataset's filter composes zCDP rho (so rho is what its accounting uses)."""
    from app.accounting.filters import RHO_FILTERS  # (the conversions: scipy.stats)

    return filter_name in {f.value for f in RHO_FILTERS}


UNIT_WORDS = {"day": "day", "week": "ISO week", "month": "month"}
"""A partition unit in the words of docs/budgets.md (blocks are UTC days, ISO weeks, months)."""


def budget_text(answer: dict[str, Any], *, short: bool = False) -> str:
    """A dataset answer's budget in one line. On a partitioned dataset the ``budget`` applies to
    each block and its ``spent`` composes all charges, judged against the lifetime budget: so
    both are named, the budget per block and the lifetime budget (or that it has none).
    ``short`` (a table cell): ``1, 1e-06 per day; lifetime 6, 1e-06``; else ``budget per block
    epsilon 1, delta 1e-06 (each day); lifetime budget epsilon 6, delta 1e-06``."""
    b = answer["budget"]
    unit = (answer.get("partition") or {}).get("unit")
    life = answer.get("lifetime_budget")
    if short:
        text = f"{left(b['epsilon'])}, {left(b['delta'])}"
        if unit is None:
            return text
        per = f"{text} per {UNIT_WORDS.get(unit, unit)}"
        if life:
            return f"{per}; lifetime {left(life['epsilon'])}, {left(life['delta'])}"
        return f"{per}; no lifetime budget"
    text = f"epsilon {left(b['epsilon'])}, delta {left(b['delta'])}"
    if unit is None:
        return f"budget {text}"
    per = f"budget per block {text} (each {UNIT_WORDS.get(unit, unit)})"
    if life:
        limit = f"epsilon {left(life['epsilon'])}, delta {left(life['delta'])}"
        return f"{per}; lifetime budget {limit}"
    return f"{per}; no lifetime budget"


STATE_LABELS = {"ok": "ok", "warning": "WARNING", "exhausted": "EXHAUSTED"}
DEFAULT_WARNING_THRESHOLD = 0.8
"""The server's default ``warning_threshold``, for an answer from a server too old to say."""


def state_label(answer: dict[str, Any]) -> str:
    """A dataset's or budget answer's state for people: ok, WARNING or EXHAUSTED.

    The server computes the state with one rule for the API, the CLI and the dashboard
    (``app.services.answers.budget_state``, docs/operations.md), so this shows its ``state``.
    An older server that leaves it out gets the dashboard's fallback: exhausted when it says
    ``exhausted``, warning from ``warning_threshold`` (0.8 by default) of the epsilon budget
    used, ok otherwise."""
    state = answer.get("state")
    if not state:
        budget = (answer.get("budget") or {}).get("epsilon") or 0.0
        spent = (answer.get("spent") or {}).get("epsilon") or 0.0
        threshold = answer.get("warning_threshold") or DEFAULT_WARNING_THRESHOLD
        if answer.get("exhausted"):
            state = "exhausted"
        elif budget > 0 and spent >= threshold * budget:
            state = "warning"
        else:
            state = "ok"
    return STATE_LABELS.get(state, str(state))


def describe(mechanism: dict[str, Any] | None) -> str:
    """A mechanism object in one short line: ``gaussian sigma=20 sensitivity=1``."""
    if not mechanism:
        return ""
    fields = [
        f"{k}={','.join(f'{x:g}' for x in v) if isinstance(v, list) else v}"
        for k, v in mechanism.items()
        if k not in ("mechanism", "v") and not (k == "count" and v == 1)
    ]
    return " ".join([str(mechanism.get("mechanism", "?")), *fields])


def when(timestamp: Any) -> str:
    """An ISO 8601 UTC time to the second, for tables."""
    return str(timestamp or "")[:19].replace("T", " ")


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


__all__ = [
    "DEFAULT_URL",
    "EXIT_ERROR",
    "EXIT_OVER_BUDGET",
    "JSON_OUT",
    "KEY",
    "KEY_ENV",
    "TRANSPORT",
    "UNIT_WORDS",
    "URL",
    "URL_ENV",
    "Session",
    "budget_text",
    "characters",
    "choice",
    "connect",
    "console",
    "describe",
    "err_console",
    "explain",
    "fail",
    "finite",
    "load_json",
    "num",
    "num_toward",
    "over_budget",
    "print_json",
    "state_label",
    "unsendable",
    "uses_rho",
    "when",
]
