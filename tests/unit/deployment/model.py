"""The Dockerfile and .dockerignore as a build reads them, for the deployment tests.

There is no Docker engine here: the tests parse the files and check what would otherwise
break only at deploy time.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_TARGET = "relay"  # relay run | mirror | db ...: no Java, no Spark
SPARK_TARGET = "relay-spark"
JAVA_OR_SPARK = re.compile(r"java|jdk|jre|spark", re.IGNORECASE)


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: RUN, COPY, ...
    args: str
    line: int

    def flags(self) -> dict[str, str]:
        """The leading ``--name=value`` flags (``COPY --from=wheel``, ``RUN --mount=...``)."""
        found: dict[str, str] = {}
        for word in self.args.split():
            if not word.startswith("--"):
                break
            name, _, value = word[2:].partition("=")
            found[name] = value
        return found

    def text(self) -> str:
        """The arguments without the leading flags."""
        rest = self.args.split(" ")
        while rest and rest[0].startswith("--"):
            rest.pop(0)
        return " ".join(rest).strip()

    def words(self) -> list[str]:
        """The arguments without the leading flags: JSON (exec) form or shell words."""
        if self.text().startswith("["):
            return list(yaml.safe_load(self.text()))
        return shlex.split(self.text())


@dataclass(frozen=True)
class Stage:
    name: str
    base: str
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, instruction) with continuation lines joined and comments dropped."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        yield start, " ".join(pending)
        pending = []
    assert not pending, "the Dockerfile ends inside a continued line"


def parse_dockerfile(text: str) -> list[Stage]:
    stages: list[Stage] = []
    current: list[Instruction] = []
    name = base = ""
    for number, line in _logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            if base:
                stages.append(Stage(name, base, tuple(current)))
            words = args.split()
            words = [w for w in words if not w.startswith("--")]
            base = words[0]
            name = words[2].lower() if len(words) == 3 and words[1].upper() == "AS" else ""
            current = []
        elif base:
            current.append(Instruction(keyword, args.strip(), number))
    assert base, "no FROM in the Dockerfile"
    stages.append(Stage(name, base, tuple(current)))
    return stages


DOCKERFILE = parse_dockerfile((ROOT / "Dockerfile").read_text())
STAGES = {stage.name: stage for stage in DOCKERFILE if stage.name}


def chain(target: str) -> list[Stage]:
    """The stages an image of ``target`` is made of, from its first base to itself."""
    assert target in STAGES, f"no stage {target} in the Dockerfile"
    stages = [STAGES[target]]
    while stages[0].base.lower() in STAGES:
        stages.insert(0, STAGES[stages[0].base.lower()])
    return stages


def instructions(target: str, keyword: str | None = None) -> list[Instruction]:
    return [
        i for stage in chain(target) for i in stage.instructions if keyword in (None, i.keyword)
    ]


def last(target: str, keyword: str) -> Instruction:
    found = instructions(target, keyword)
    assert found, f"target {target} has no {keyword}"
    return found[-1]


def pip_installs(target: str) -> list[tuple[Instruction, list[str]]]:
    """Each ``pip install`` run in the target: the instruction and pip's arguments."""
    found = []
    for run in instructions(target, "RUN"):
        for command in re.split(r"&&|;|\|\|", run.text()):
            words = shlex.split(command)
            for n in range(len(words) - 1):
                if words[n].endswith("pip") and words[n + 1] == "install":
                    found.append((run, words[n + 2 :]))
    return found


def builder() -> Stage:
    """The one stage that builds the wheel."""
    builds = [
        stage
        for stage in DOCKERFILE
        if any(
            re.search(r"\bpip\s+wheel\b|\bpython\s+-m\s+build\b", run.args)
            for run in stage.all("RUN")
        )
    ]
    assert len(builds) == 1, f"expected one stage that builds the wheel, got {len(builds)}"
    return builds[0]


def context_sources(stage: Stage) -> list[str]:
    """What the stage's COPY and ADD instructions take from the build context."""
    sources: list[str] = []
    for copy in stage.all("COPY") + stage.all("ADD"):
        if "from" not in copy.flags():
            sources.extend(copy.words()[:-1])
    return sources


def image_jobs() -> set[str]:
    """The paths of the jobs' entry points inside the Spark image."""
    found = set()
    for copy in instructions(SPARK_TARGET, "COPY"):
        *sources, destination = copy.words()
        for source in sources:
            if source.startswith("jobs/"):
                assert destination.endswith("/"), f"line {copy.line}: copy into a directory"
                found.add(destination + Path(source).name)
    return found


def image_env(target: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in instructions(target, "ENV"):
        for word in shlex.split(instruction.args):
            name, _, value = word.partition("=")
            env[name] = value
    return env


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match, plus ``**``) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(is an exception, pattern) per line of .dockerignore, in order."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip().removeprefix("./").strip("/")
        rules.append((negated, _ignore_regex(pattern)))
    return rules


def in_context(path: str) -> bool:
    """Whether ``path`` (relative to the checkout) reaches the build context: the last
    rule that matches it or one of its parent directories decides, as Docker does."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    kept = True
    for negated, regex in _ignore_rules():
        if any(regex.fullmatch(c) for c in candidates):
            kept = negated
    return kept
