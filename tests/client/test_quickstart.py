"""docs/quickstart.md, followed literally: its install commands made the client venv (see
conftest), and its Python files run there, against a live server, as a pipeline author would
run them: ``admin.py`` with the admin key, ``release.py`` and ``budget.py`` with the key
``admin.py`` printed. The ``export`` lines of the page are the environment given to each run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.client.conftest import ClientVenv, code_blocks
from tests.conftest import ADMIN_KEY
from tests.live import Server, running
from tests.packaging.venvs import clean_env, run

pytestmark = pytest.mark.slow


@pytest.fixture
def server(sqlite_url: str) -> Iterator[Server]:
    with running(sqlite_url, ADMIN_KEY) as s:
        yield s


def _files() -> dict[str, str]:
    """The page's Python blocks by the file name on their first line (``# admin.py``)."""
    files = {}
    for lang, text in code_blocks():
        if lang == "python":
            first = text.splitlines()[0]
            match = re.fullmatch(r"# (\w+\.py)", first)
            assert match, f"a Python block of the quickstart names its file: {first!r}"
            files[match.group(1)] = text
    return files


def test_the_exports_are_the_variables_the_client_reads() -> None:
    exports = [t for lang, t in code_blocks() if lang == "sh" and "export" in t]
    names = re.findall(r"^export (\w+)=", "".join(exports), re.MULTILINE)
    assert names == ["PRIVACY_LEDGER_URL", "PRIVACY_LEDGER_API_KEY"]


def test_the_quickstart_runs_as_written(
    client_venv: ClientVenv, server: Server, tmp_path: Path
) -> None:
    files = _files()
    assert list(files) == ["admin.py", "release.py", "budget.py"]
    for name, text in files.items():
        (tmp_path / name).write_text(text)

    def python(name: str, key: str) -> list[str]:
        env = clean_env({"PRIVACY_LEDGER_URL": server.url, "PRIVACY_LEDGER_API_KEY": key})
        out = run([str(client_venv.python), name], cwd=tmp_path, env=env).stdout
        return out.strip().splitlines()

    admin_out = python("admin.py", ADMIN_KEY)
    pipeline_key = admin_out[-1]
    assert pipeline_key.startswith("pl_p_")  # a pipeline key, printed once

    release_out = python("release.py", pipeline_key)
    noisy = [int(x) for x in re.findall(r"-?\d+", release_out[-1])]
    assert len(noisy) == 8 and abs(sum(noisy) - 10_000) < 8 * 8 * 6  # 8 bands, sigma 8 each

    budget_out = python("budget.py", pipeline_key)
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=120
    ) as api:
        budget = api.get("/v1/datasets/visits/budget").json()
        (entry,) = api.get("/v1/datasets/visits/ledger").json()["entries"]
        keys = api.get("/v1/keys").json()["keys"]
    # the release was charged with the sigma it used, under the pipeline's own key
    assert {k: v for k, v in entry["mechanism"].items() if k != "v"} == {
        "mechanism": "gaussian",
        "sigma": 8.0,
        "sensitivity": 1.0,
        "count": 1,
    }
    assert entry["label"] == "visits by age band" and release_out[0].startswith(
        f"charged as entry {entry['id']};"
    )
    pipeline = next(k for k in keys if k["role"] == "pipeline")
    assert entry["key_id"] == pipeline["id"] and pipeline["datasets"] == [budget["dataset_id"]]
    assert budget_out == [
        f"spent epsilon {budget['spent']['epsilon']:.3f} of {budget['budget']['epsilon']} "
        f"at delta {budget['spent']['delta']:g} ({budget['spent']['method']}); "
        f"1 entries; exhausted: False"
    ]
