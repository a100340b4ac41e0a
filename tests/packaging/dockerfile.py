"""The Dockerfile as data: stages, their instructions and COPY sources (``dockerfile-parse``)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from dockerfile_parse import DockerfileParser

from tests.packaging.venvs import ROOT


@dataclass(frozen=True)
class Copy:
    """A COPY or ADD: its ``--flag=value`` options, sources and destination."""

    word: str
    flags: dict[str, str]
    sources: list[str]
    dest: str


@dataclass
class Stage:
    """One ``FROM ... [AS name]`` stage and the instructions that follow it."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, word: str) -> list[str]:
        return [value for w, value in self.instructions if w == word]

    def words(self) -> list[str]:
        return [w for w, _ in self.instructions]

    def copies(self) -> list[Copy]:
        return [_copy(w, v) for w, v in self.instructions if w in ("COPY", "ADD")]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for value in self.values("ENV"):
            for item in shlex.split(value):
                key, _, val = item.partition("=")
                out[key] = val
        return out


def stages(path: Path = ROOT / "Dockerfile") -> list[Stage]:
    """The Dockerfile's stages in order (comments dropped, continuations joined)."""
    out: list[Stage] = []
    for item in DockerfileParser(path=str(path)).structure:
        word, value = item["instruction"].upper(), item["value"]
        if word == "COMMENT":
            continue
        if word == "FROM":
            parts = value.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            out.append(Stage(base=parts[0], name=name))
            continue
        assert out, f"{word} before the first FROM"
        out[-1].instructions.append((word, value))
    return out


def exec_form(value: str) -> list[str]:
    """A JSON-array instruction argument (``CMD ["sh", "-c", "..."]``)."""
    parsed = json.loads(value)
    assert isinstance(parsed, list) and all(isinstance(x, str) for x in parsed), value
    return parsed


def _copy(word: str, value: str) -> Copy:
    parts = exec_form(value) if value.lstrip().startswith("[") else shlex.split(value)
    flags = dict(p[2:].partition("=")[::2] for p in parts if p.startswith("--"))
    paths = [p for p in parts if not p.startswith("--")]
    return Copy(word, flags, paths[:-1], paths[-1])
