"""The Tiltfile, executed by a Starlark interpreter with recording stand-ins for Tilt's builtins.

The stand-ins have the signatures of Tilt's API (tilt-dev/tilt ``internal/tiltfile/api``) and of the
``restart_process`` extension, so a misspelt builtin or keyword fails here as it would in ``tilt up``. What the
Tiltfile declares is then checked against the rest of the repository: the images and resources it names exist in
the rendered dev overlay, the modules it runs exist, and each host process gets settings its service accepts.
"""

from __future__ import annotations

import dataclasses
import graphlib
import importlib
import importlib.util
import posixpath
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

starlark = pytest.importorskip("starlark", reason="starlark-pyo3 runs the Tiltfile (pip install starlark-pyo3)")

from oncelog.config import ServiceSettings  # noqa: E402
from oncelog.config.settings import env_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TILTFILE = ROOT / "Tiltfile"
DEV_OVERLAY = "deploy/k8s/overlays/dev"
RESTART_FILE = "/.restart-proc"  # the restart_process extension's default
# as in test_k8s_manifests: variables set ahead of the settings that will read them
PENDING_VARIABLES = frozenset({"ONCELOG_PARTITION_STORAGE_DATA_DIR"})


class TiltfileFailed(Exception):
    """The Tiltfile called ``fail()``."""


@dataclasses.dataclass
class Tilt:
    """What one evaluation of the Tiltfile declared, in call order per builtin."""

    args: dict[str, Any]
    calls: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)

    def record(self, builtin: str, **arguments: Any) -> dict[str, Any]:
        """Store one call's arguments and return them, so values built by one builtin can be inspected later."""
        entry = {"builtin": builtin, **arguments}
        self.calls.setdefault(builtin, []).append(entry)
        return entry

    def of(self, builtin: str) -> list[dict[str, Any]]:
        """The calls of ``builtin``."""
        return self.calls.get(builtin, [])

    def by_name(self, builtin: str, key: str = "name") -> dict[str, dict[str, Any]]:
        """The calls of ``builtin`` keyed by an argument, refusing two calls for the same name."""
        calls = self.of(builtin)
        named = {call[key]: call for call in calls}
        assert len(named) == len(calls), f"{builtin} called twice for the same {key}"
        return named


def _builtins(tilt: Tilt) -> dict[str, Callable[..., Any]]:
    """Stand-ins with Tilt's signatures; each records its arguments."""

    def docker_build(
        ref: str, context: str, build_args: Any = None, dockerfile: str = "Dockerfile", dockerfile_contents: Any = "",
        live_update: Any = None, match_in_env_vars: bool = False, ignore: Any = None, only: Any = None,
        entrypoint: Any = None, target: str = "", ssh: Any = "", network: str = "", secret: Any = "",
        extra_tag: Any = "", container_args: Any = None, cache_from: Any = None, pull: bool = False,
        platform: str = "", extra_hosts: Any = None,
    ) -> None:  # fmt: skip
        tilt.record("docker_build", ref=ref, context=context, build_args=build_args or {}, dockerfile=dockerfile,
                    live_update=live_update or [], only=only or [], entrypoint=entrypoint, target=target)  # fmt: skip

    def docker_build_with_restart(
        ref: str, context: str, entrypoint: Any, live_update: Any, base_suffix: str = "-base",
        restart_file: str = RESTART_FILE, **kwargs: Any,
    ) -> None:  # fmt: skip
        # the extension forwards everything else to docker_build: its keywords must be docker_build's
        docker_build(ref + base_suffix, context, **kwargs)
        tilt.record("docker_build_with_restart", ref=ref, context=context, entrypoint=entrypoint,
                    live_update=live_update, restart_file=restart_file, **kwargs)  # fmt: skip

    def k8s_resource(
        workload: str = "", new_name: str = "", port_forwards: Any = None, extra_pod_selectors: Any = None,
        trigger_mode: Any = None, resource_deps: Any = None, objects: Any = None, auto_init: bool = True,
        pod_readiness: str = "", links: Any = None, labels: Any = None, discovery_strategy: str = "",
    ) -> None:  # fmt: skip
        forwards = port_forwards if isinstance(port_forwards, list) else [port_forwards] if port_forwards else []
        tilt.record("k8s_resource", name=workload or new_name, port_forwards=forwards,
                    resource_deps=resource_deps or [], labels=labels or [])  # fmt: skip

    def local_resource(
        name: str, cmd: Any = "", deps: Any = None, trigger_mode: Any = "auto", resource_deps: Any = None,
        ignore: Any = None, auto_init: bool = True, serve_cmd: Any = "", cmd_bat: Any = "", serve_cmd_bat: Any = "",
        allow_parallel: bool = False, links: Any = None, labels: Any = None, env: Any = None, serve_env: Any = None,
        readiness_probe: Any = None, dir: str = "", serve_dir: str = "",
    ) -> None:  # fmt: skip
        tilt.record("local_resource", name=name, cmd=cmd, deps=deps or [], trigger_mode=trigger_mode,
                    resource_deps=resource_deps or [], auto_init=auto_init, serve_cmd=serve_cmd,
                    labels=labels or [], serve_env=serve_env or {}, readiness_probe=readiness_probe)  # fmt: skip

    def port_forward(
        local_port: int, container_port: int | None = None, name: str | None = None, link_path: str | None = None,
        host: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        return {"local_port": local_port, "container_port": container_port or local_port, "name": name}

    def probe(
        initial_delay_secs: int = 0, timeout_secs: int = 1, period_secs: int = 10, success_threshold: int = 1,
        failure_threshold: int = 3, exec: Any = None, http_get: Any = None, tcp_socket: Any = None,
    ) -> dict[str, Any]:  # fmt: skip
        actions = [a for a in (exec, http_get, tcp_socket) if a is not None]
        assert len(actions) == 1, "probe() takes exactly one of exec, http_get, tcp_socket"
        return {"action": actions[0], "period_secs": period_secs, "failure_threshold": failure_threshold}

    def tcp_socket_action(port: int, host: str = "localhost") -> dict[str, Any]:
        return {"tcp_socket": port, "host": host}

    def sync(local_path: str, remote_path: str) -> dict[str, Any]:
        return {"step": "sync", "local": local_path, "remote": remote_path}

    def fall_back_on(files: Any) -> dict[str, Any]:
        return {"step": "fall_back_on", "files": files if isinstance(files, list) else [files]}

    def run(cmd: Any, trigger: Any = None, echo_off: bool = False) -> dict[str, Any]:
        return {"step": "run", "cmd": cmd}

    def kustomize(pathToDir: str, kustomize_bin: str | None = None, flags: Any = None) -> dict[str, Any]:
        return {"kustomize": pathToDir}

    def k8s_yaml(yaml: Any, allow_duplicates: bool = False) -> None:
        tilt.record("k8s_yaml", yaml=yaml)

    def watch_settings(ignore: Any) -> None:
        tilt.record("watch_settings", ignore=ignore)

    def fail(msg: str) -> None:
        raise TiltfileFailed(msg)

    def define(kind: str) -> Callable[..., None]:
        def define_setting(name: str, args: bool = False, usage: str = "") -> None:
            tilt.record("config.define", name=name, kind=kind, args=args)

        return define_setting

    def parse() -> dict[str, Any]:
        defined = {call["name"] for call in tilt.of("config.define")}
        unknown = set(tilt.args) - defined
        assert not unknown, f"tilt would reject undefined flags {sorted(unknown)}"
        return dict(tilt.args)

    def set_enabled_resources(resources: list[str]) -> None:
        tilt.record("config.set_enabled_resources", resources=resources)

    return {
        "docker_build": docker_build,
        "docker_build_with_restart": docker_build_with_restart,
        "k8s_resource": k8s_resource,
        "local_resource": local_resource,
        "port_forward": port_forward,
        "probe": probe,
        "tcp_socket_action": tcp_socket_action,
        "sync": sync,
        "fall_back_on": fall_back_on,
        "run": run,
        "kustomize": kustomize,
        "k8s_yaml": k8s_yaml,
        "watch_settings": watch_settings,
        "fail": fail,
        "_define_string": define("string"),
        "_define_string_list": define("string_list"),
        "_define_bool": define("bool"),
        "_parse": parse,
        "_set_enabled_resources": set_enabled_resources,
        "_path_exists": lambda path: (ROOT / path).exists(),
        "_path_join": lambda *parts: posixpath.join(*parts),
        "_path_dirname": posixpath.dirname,
        "_path_basename": posixpath.basename,
    }


# Tilt's namespaces (config, os) are structs of builtins; Starlark builds them from the stand-ins above.
_NAMESPACES = f"""
config = struct(
    define_string=_define_string, define_string_list=_define_string_list, define_bool=_define_bool,
    parse=_parse, set_enabled_resources=_set_enabled_resources, main_dir={str(ROOT)!r}, main_path={str(TILTFILE)!r},
)
os = struct(path=struct(exists=_path_exists, join=_path_join, dirname=_path_dirname, basename=_path_basename))
TRIGGER_MODE_AUTO = "auto"
TRIGGER_MODE_MANUAL = "manual"
"""


def run_tiltfile(args: dict[str, Any] | None = None) -> Tilt:
    """Evaluate the Tiltfile as ``tilt up -- <args>`` would, returning what it declared."""
    tilt = Tilt(args=args or {})
    builtins = _builtins(tilt)
    globals_ = starlark.Globals.extended_by([starlark.LibraryExtension.StructType, starlark.LibraryExtension.Print])
    # Tilt runs go.starlark.net: no f-strings, so allowing them here would hide a Tiltfile Tilt cannot load
    dialect = starlark.Dialect.extended()
    dialect.enable_f_strings = False

    module = starlark.Module()
    for name, function in builtins.items():
        module.add_callable(name, function)
    starlark.eval(module, starlark.parse("tilt-builtins", _NAMESPACES, dialect), globals_)

    extension = starlark.Module()
    extension.add_callable("docker_build_with_restart", builtins["docker_build_with_restart"])
    frozen_extension = extension.freeze()

    def load(module_id: str) -> Any:
        assert module_id == "ext://restart_process", (
            f"the Tiltfile loads {module_id}, which this test cannot stand in for"
        )
        return frozen_extension

    ast = starlark.parse("Tiltfile", TILTFILE.read_text(), dialect)
    starlark.eval(module, ast, globals_, starlark.FileLoader(load))
    return tilt


def service_modules() -> dict[str, str]:
    """kebab-case service name -> Python package, for every runnable package under services/oncelog."""
    return {
        path.parent.name.replace("_", "-"): path.parent.name
        for path in sorted((ROOT / "services" / "oncelog").glob("*/__main__.py"))
    }


def settings_class(module: str) -> type[ServiceSettings]:
    """The settings dataclass a service's ``config`` module declares."""
    config = importlib.import_module(f"oncelog.{module}.config")
    (cls,) = [
        obj
        for obj in vars(config).values()
        if isinstance(obj, type) and issubclass(obj, ServiceSettings) and obj.__module__ == config.__name__
    ]
    return cls


def render_dev_overlay() -> list[dict[str, Any]]:
    """The objects of the overlay the Tiltfile deploys."""
    yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read rendered manifests")
    if shutil.which("kubectl"):
        command = ["kubectl", "kustomize"]
    elif shutil.which("kustomize"):
        command = ["kustomize", "build"]
    else:
        pytest.skip("neither kubectl nor kustomize is on PATH: the dev overlay cannot be rendered")
    done = subprocess.run([*command, str(ROOT / DEV_OVERLAY)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def k8s_mode() -> Tilt:
    """The Tiltfile evaluated with no flags (``tilt up``)."""
    return run_tiltfile()


@pytest.fixture(scope="module")
def local_mode() -> Tilt:
    """The Tiltfile evaluated as ``tilt up -- --mode=local``."""
    return run_tiltfile({"mode": "local"})


@pytest.fixture(scope="module")
def dev_workloads() -> dict[str, dict[str, Any]]:
    """Deployments and StatefulSets of the dev overlay, by name."""
    return {o["metadata"]["name"]: o for o in render_dev_overlay() if o["kind"] in ("Deployment", "StatefulSet")}


# ---- both modes ----------------------------------------------------------------------------------------------------


def test_default_mode_is_k8s(k8s_mode: Tilt) -> None:
    assert k8s_mode.of("k8s_yaml") and not {c["name"] for c in k8s_mode.of("local_resource")} & set(service_modules())


def test_unknown_mode_fails() -> None:
    with pytest.raises(starlark.StarlarkError, match="--mode must be k8s or local"):
        run_tiltfile({"mode": "compose"})


def test_resource_dependencies_name_resources_and_form_no_cycle(k8s_mode: Tilt, local_mode: Tilt) -> None:
    for tilt in (k8s_mode, local_mode):
        graph = {c["name"]: list(c["resource_deps"]) for b in ("k8s_resource", "local_resource") for c in tilt.of(b)}
        for name, deps in graph.items():
            assert set(deps) <= set(graph), f"{name} depends on undeclared resources {set(deps) - set(graph)}"
        # raises CycleError on a cycle, which Tilt would only report at runtime
        tuple(graphlib.TopologicalSorter(graph).static_order())


def test_every_resource_is_labelled(k8s_mode: Tilt, local_mode: Tilt) -> None:
    for tilt in (k8s_mode, local_mode):
        for call in tilt.of("k8s_resource") + tilt.of("local_resource"):
            assert call["labels"], f"{call['name']} has no label to group it in the UI"


def test_protos_are_regenerated_when_a_proto_changes(local_mode: Tilt) -> None:
    protos = local_mode.by_name("local_resource")["protos"]
    assert "proto" in protos["deps"]
    assert "scripts/gen_protos.py" in protos["cmd"] and (ROOT / "scripts" / "gen_protos.py").exists()


def test_unit_tests_run_on_demand(local_mode: Tilt) -> None:
    unit_tests = local_mode.by_name("local_resource")["unit-tests"]
    assert unit_tests["trigger_mode"] == "manual" and unit_tests["auto_init"] is False
    assert "pytest" in unit_tests["cmd"] and (ROOT / "tests" / "unit").is_dir()


# ---- k8s mode ------------------------------------------------------------------------------------------------------


def test_k8s_mode_deploys_the_dev_overlay(k8s_mode: Tilt) -> None:
    (call,) = k8s_mode.of("k8s_yaml")
    assert call["yaml"] == {"kustomize": DEV_OVERLAY}
    assert (ROOT / DEV_OVERLAY / "kustomization.yaml").exists()


def test_one_image_per_service_from_the_one_dockerfile(
    k8s_mode: Tilt, dev_workloads: dict[str, dict[str, Any]]
) -> None:
    builds = k8s_mode.by_name("docker_build_with_restart", key="ref")
    images = {
        c["image"].rsplit(":", 1)[0]: name
        for name, workload in dev_workloads.items()
        for c in workload["spec"]["template"]["spec"]["containers"]
    }
    assert {images.get(ref) for ref in builds} == set(service_modules()), "one build per service, used by its workload"
    for ref, build in builds.items():
        module = build["build_args"]["SERVICE"]
        assert service_modules()[images[ref]] == module, f"{ref} builds SERVICE={module}"
        assert importlib.util.find_spec(f"oncelog.{module}.__main__") is not None
        assert build["dockerfile"] == "deploy/docker/Dockerfile" and (ROOT / build["dockerfile"]).exists()
        assert build["entrypoint"] == ["python", "-m", f"oncelog.{module}"]
        assert all((ROOT / path).exists() for path in build["only"]), build["only"]


def test_live_update_syncs_the_sources_and_restarts_in_place(
    k8s_mode: Tilt, dev_workloads: dict[str, dict[str, Any]]
) -> None:
    for ref, build in k8s_mode.by_name("docker_build_with_restart", key="ref").items():
        steps = build["live_update"]
        syncs = {s["local"]: s["remote"] for s in steps if s["step"] == "sync"}
        assert syncs == {"libs": "/app/libs", "services": "/app/services"}, ref
        assert all(any(local.startswith(o) for o in build["only"]) for local in syncs), "synced paths are built"
        fall_backs = [f for s in steps if s["step"] == "fall_back_on" for f in s["files"]]
        assert "pyproject.toml" in fall_backs, "a dependency change needs a full image build"
        # the restart file must be in the image's filesystem, not under a volume that hides it at runtime
        workload = dev_workloads[ref.split("/", 1)[1]]
        mounts = [m["mountPath"] for c in workload["spec"]["template"]["spec"]["containers"] for m in c["volumeMounts"]]
        restart_dir = posixpath.dirname(build["restart_file"])
        assert not any(restart_dir == m or restart_dir.startswith(m + "/") for m in mounts), build["restart_file"]
        assert build["restart_file"].startswith("/app/"), "the service user can write only under /app (CODE_OWNER)"
        assert build["build_args"].get("CODE_OWNER") == "10001"


def test_k8s_resources_name_workloads_of_the_overlay(k8s_mode: Tilt, dev_workloads: dict[str, dict[str, Any]]) -> None:
    resources = k8s_mode.by_name("k8s_resource")
    assert set(resources) == set(dev_workloads), "every workload configured, none misspelt"
    for name, resource in resources.items():
        ports = {
            p["containerPort"]
            for c in dev_workloads[name]["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        for forward in resource["port_forwards"]:
            container_port = (
                forward["container_port"] if isinstance(forward, dict) else int(str(forward).rsplit(":", 1)[-1])
            )
            assert container_port in ports, f"{name} forwards to port {container_port}, which its pod does not expose"
    for name in service_modules():
        assert resources[name]["port_forwards"], f"{name} needs a port-forward for clients on the host"
        assert resources[name]["labels"] == ["core"]


# ---- local mode ----------------------------------------------------------------------------------------------------


def test_local_mode_runs_every_service_as_a_host_process(local_mode: Tilt) -> None:
    assert not local_mode.of("k8s_yaml") and not local_mode.of("docker_build_with_restart")
    resources = local_mode.by_name("local_resource")
    for name, module in service_modules().items():
        resource = resources[name]
        command = resource["serve_cmd"]
        assert command[1:] == ["-m", f"oncelog.{module}"], command
        assert all((ROOT / dep).exists() for dep in resource["deps"]), resource["deps"]
        assert f"services/oncelog/{module}" in resource["deps"] and "libs" in resource["deps"]


def test_local_processes_get_settings_their_service_accepts(local_mode: Tilt) -> None:
    resources = local_mode.by_name("local_resource")
    ports = set()
    for name, module in service_modules().items():
        env = resources[name]["serve_env"]
        cls = settings_class(module)
        known = {env_name(cls.ENV_PREFIX, f) for f in dataclasses.fields(cls)}
        unknown = {k for k in env if k.startswith("ONCELOG_")} - known - PENDING_VARIABLES
        assert not unknown, f"{name}: variables no setting reads (misspelt?): {sorted(unknown)}"
        settings = cls.from_env(env)
        port = int(settings.listen.rsplit(":", 1)[1])
        assert port != 0, f"{name} needs a fixed port for its readiness probe and for clients"
        assert resources[name]["readiness_probe"]["action"]["tcp_socket"] == port
        ports.add(port)
    assert len(ports) == len(service_modules()), "two services on one port"
