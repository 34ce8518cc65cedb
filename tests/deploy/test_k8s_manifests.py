"""Offline validation of deploy/k8s: kustomize renders every overlay, every object passes the Kubernetes OpenAPI
schemas, and the deployment rules of design/architecture.md §9 and design/conventions.md §3 hold for the rendered
objects.

The environment each oncelog container would receive is rebuilt from the rendered ConfigMaps, Secrets, downward
API fields and ``$(VAR)`` references, then loaded through the service's own settings dataclass, so a variable the
code reads but a manifest forgets, a misspelt name, or a value that does not parse fails here instead of in a pod.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import importlib
import importlib.util
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read rendered manifests (pip install pyyaml)")

from oncelog.config import ServiceSettings  # noqa: E402
from oncelog.config.settings import env_name  # noqa: E402
from oncelog.telemetry.metrics import CATALOG  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("dev", "prod")
WORKLOAD_KINDS = ("Deployment", "StatefulSet")
# Oldest Kubernetes release we support (native gRPC probes are GA since 1.27) and the newest schemas bundled.
SCHEMA_VERSIONS = ("1.29", "latest")

# Settings whose defaults only suit a single process on one machine (loopback, port 0, <hostname>-<pid>, a SQLite
# file or a directory relative to the working directory): a pod must set them explicitly.
CLUSTER_REQUIRED_FIELDS = ("listen", "advertise", "node_id", "database_url", "data_dir")
# Services that keep no catalog connection: they reach the cluster through ONCELOG_BOOTSTRAP instead, and the Kafka
# protocol port they serve besides gRPC.
CATALOG_FREE = {"kafka-gateway": ("bootstrap", "kafka_listen", "kafka_advertise")}
EXTRA_SERVICE_PORTS = {"kafka-gateway": {"kafka": "kafka_listen"}}
# Variables the manifests set before the settings that read them exist (segment directory).
PENDING_VARIABLES = frozenset({"ONCELOG_PARTITION_STORAGE_DATA_DIR"})
# Settings naming files mounted into the pod; validation reads them, so loading stands in empty local files.
MOUNTED_FILE_VARIABLES = (
    "ONCELOG_TLS_CERT",
    "ONCELOG_TLS_KEY",
    "ONCELOG_TLS_CA",
    "ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_CERT",
    "ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_KEY",
)
# Secrets the prod overlay expects to exist in the namespace (created out of band, docs/deploy.md), with the
# value each key stands for when the environment is rebuilt.
EXTERNAL_SECRETS = {
    "oncelog-datastores": {
        "database-url": "postgresql+psycopg://oncelog:secret@db.example.internal:5432/oncelog",
        "redis-url": "rediss://cache.example.internal:6380/0",
    },
    "oncelog-tls": {"tls.crt": "", "tls.key": "", "ca.crt": ""},
    "oncelog-kafka-tls": {"tls.crt": "", "tls.key": ""},
}
# API groups of custom resources (Prometheus Operator), which the bundled OpenAPI schemas do not cover.
CUSTOM_API_GROUPS = ("monitoring.coreos.com/",)
# The one relaxation: Tilt's live_update writes synced sources into the container in the dev overlay.
WRITABLE_ROOT_ALLOWED = {"dev"}

_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


# ---- discovery -------------------------------------------------------------------------------------------------


def service_modules() -> dict[str, str]:
    """kebab-case service name -> Python package, for every runnable package under services/oncelog."""
    return {
        path.parent.name.replace("_", "-"): path.parent.name
        for path in sorted((ROOT / "services" / "oncelog").glob("*/__main__.py"))
    }


@functools.cache
def settings_class(module: str) -> type[ServiceSettings]:
    """The settings dataclass a service's ``config`` module declares."""
    config = importlib.import_module(f"oncelog.{module}.config")
    found = [
        obj
        for obj in vars(config).values()
        if isinstance(obj, type) and issubclass(obj, ServiceSettings) and obj.__module__ == config.__name__
    ]
    assert len(found) == 1, f"oncelog.{module}.config must declare exactly one ServiceSettings subclass: {found}"
    return found[0]


def _kustomize_command() -> list[str] | None:
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return None


@functools.cache
def _render_cached(path: str) -> tuple[dict[str, Any], ...]:
    command = _kustomize_command()
    assert command is not None
    done = subprocess.run([*command, path], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(command)} {path} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render(path: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize`` (or ``kustomize build``) produces for ``path``."""
    if _kustomize_command() is None:
        pytest.skip("neither kubectl nor kustomize is on PATH: deploy/k8s cannot be rendered")
    return list(_render_cached(str(path)))


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> str:
    """Name of an overlay under deploy/k8s/overlays."""
    return request.param


@pytest.fixture
def objects(overlay: str) -> list[dict[str, Any]]:
    """The rendered objects of ``overlay``."""
    return render(K8S / "overlays" / overlay)


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any] | None:
    """The rendered object of ``kind`` named ``name`` (generated names carry a hash suffix)."""
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    return None


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every Deployment and StatefulSet."""
    return [obj for obj in objects if obj["kind"] in WORKLOAD_KINDS]


def oncelog_workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The workloads that run an oncelog service, by name."""
    services = service_modules()
    return {w["metadata"]["name"]: w for w in workloads(objects) if w["metadata"]["name"] in services}


def containers(workload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Init and regular containers of a workload's pod template."""
    spec = workload["spec"]["template"]["spec"]
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether an equality-based selector matches ``labels``."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def matches(label_selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels and matchExpressions) matches ``labels``."""
    if not all(labels.get(k) == v for k, v in label_selector.get("matchLabels", {}).items()):
        return False
    for expr in label_selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values):
            return False
        if (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def container_env(objects: list[dict[str, Any]], workload: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The environment the container would see, with downward-API fields and ``$(VAR)`` references resolved.

    Secrets rendered with the overlay give their real values; the prod overlay's external Secrets stand in with
    the values in ``EXTERNAL_SECRETS``. A missing ConfigMap, Secret or key that is not optional fails.
    """
    pod_name = workload["metadata"]["name"] + ("-0" if workload["kind"] == "StatefulSet" else "-5d8f7c9b4-x2x7q")
    fields = {
        "metadata.name": pod_name,
        "metadata.namespace": workload["metadata"]["namespace"],
        "status.podIP": "10.244.1.23",
    }

    def secret_value(name: str, key: str, optional: bool) -> str | None:
        secret = find(objects, "Secret", name)
        if secret is not None:
            data = secret.get("data", {})
            if key in data:
                return base64.b64decode(data[key]).decode()
            assert optional, f"Secret {name} has no key {key}"
            return None
        assert name in EXTERNAL_SECRETS, f"Secret {name} is neither rendered nor a documented external Secret"
        assert key in EXTERNAL_SECRETS[name], f"external Secret {name} documents no key {key}"
        return EXTERNAL_SECRETS[name][key]

    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            ref = source["configMapRef"]
            config_map = find(objects, "ConfigMap", ref["name"])
            assert config_map is not None or ref.get("optional"), f"ConfigMap {ref['name']} is not rendered"
            env.update((config_map or {}).get("data", {}))
        else:
            ref = source["secretRef"]
            secret = find(objects, "Secret", ref["name"])
            assert secret is not None or ref.get("optional"), f"Secret {ref['name']} is not rendered"
            env.update({k: base64.b64decode(v).decode() for k, v in (secret or {}).get("data", {}).items()})
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = _REF.sub(lambda m: env.get(m.group(1), m.group(0)), var["value"])
        elif "fieldRef" in var["valueFrom"]:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["secretKeyRef"]
            value = secret_value(ref["name"], ref["key"], bool(ref.get("optional")))
            if value is not None:
                env[var["name"]] = value
        elif "configMapKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["configMapKeyRef"]
            config_map = find(objects, "ConfigMap", ref["name"])
            assert config_map is not None, f"ConfigMap {ref['name']} is not rendered"
            env[var["name"]] = config_map["data"][ref["key"]]
    return env


def service_env(objects: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """(workload, its service container, that container's environment) of the oncelog service ``name``."""
    workload = oncelog_workloads(objects)[name]
    container = next(c for c in containers(workload) if c["name"] == name)
    return workload, container, container_env(objects, workload, container)


def port_of(address: str) -> int:
    """The port of a host:port address."""
    return int(address.rsplit(":", 1)[1])


def settings_env(name: str, field_name: str) -> str:
    """The variable that feeds ``field_name`` of service ``name``."""
    cls = settings_class(service_modules()[name])
    field = next(f for f in dataclasses.fields(cls) if f.name == field_name)
    return env_name(cls.ENV_PREFIX, field)


def setting_value(name: str, env: dict[str, str], field_name: str) -> str:
    """The value a manifest gives setting ``field_name`` of service ``name``; failing when it gives none."""
    variable = settings_env(name, field_name)
    assert variable in env, f"{name} does not set {variable}"
    return env[variable]


def with_mounted_files(env: dict[str, str], directory: Path) -> dict[str, str]:
    """``env`` with every mounted file it names replaced by an empty readable file under ``directory``."""
    loadable = dict(env)
    for variable in MOUNTED_FILE_VARIABLES:
        if env.get(variable):
            stand_in = directory / variable.lower()
            stand_in.touch()
            loadable[variable] = str(stand_in)
    return loadable


def quantity(value: str | int | float) -> float:
    """A Kubernetes resource quantity as a number (cores or bytes)."""
    text = str(value)
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * units[suffix]
    return float(text)


# ---- rendering and schemas -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["base", *(f"overlays/{o}" for o in OVERLAYS)])
def test_kustomization_renders(path: str) -> None:
    objects = render(K8S / path)
    assert objects, f"{path} renders no objects"
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys)), "duplicate objects"


def test_every_component_is_used_by_an_overlay() -> None:
    used: set[Path] = set()
    for overlay in OVERLAYS:
        directory = K8S / "overlays" / overlay
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        used |= {(directory / c).resolve() for c in kustomization.get("components", [])}
    for component in sorted(p for p in (K8S / "components").iterdir() if p.is_dir()):
        kind = yaml.safe_load((component / "kustomization.yaml").read_text())["kind"]
        assert kind == "Component", f"{component.name} must be a kustomize Component"
        assert component.resolve() in used, f"component {component.name} is in no overlay"


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_objects_match_kubernetes_openapi_schemas(objects: list[dict[str, Any]], version: str) -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate bundles the OpenAPI schemas (pip install kubernetes-validate)",
    )
    if version == "latest":
        version = kubernetes_validate.latest_version()
    errors = []
    for obj in objects:
        if obj["apiVersion"].startswith(CUSTOM_API_GROUPS):
            continue  # no bundled schema: the prometheus-operator tests below check these
        try:
            # strict: a misspelt or misplaced field is an error instead of being dropped by the API server
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
    assert not errors, "\n".join(errors)


# ---- what runs ---------------------------------------------------------------------------------------------------


def test_every_service_has_a_workload_running_its_module(objects: list[dict[str, Any]]) -> None:
    found = oncelog_workloads(objects)
    assert set(found) == set(service_modules()), "one workload per package with a __main__ under services/oncelog"
    for name, module in service_modules().items():
        assert importlib.util.find_spec(f"oncelog.{module}.__main__") is not None
        image = next(c for c in containers(found[name]) if c["name"] == name)["image"]
        repository = image.rsplit(":", 1)[0]
        assert repository.endswith(f"oncelog/{name}"), f"{name} runs image {image}; the Dockerfile builds per SERVICE"


def test_images_are_pinned(objects: list[dict[str, Any]]) -> None:
    for workload in workloads(objects):
        for container in containers(workload):
            image = container["image"]
            tag = image.rsplit("/", 1)[-1].partition(":")[2]
            assert tag and tag != "latest", f"{workload['metadata']['name']}: image {image} has no pinned tag"


def test_storage_is_a_statefulset_with_a_volume_per_node(objects: list[dict[str, Any]]) -> None:
    workload, container, env = service_env(objects, "partition-storage")
    assert workload["kind"] == "StatefulSet"
    claims = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    data_dir = env["ONCELOG_PARTITION_STORAGE_DATA_DIR"]
    assert mounts.get(data_dir) in claims, f"segments in {data_dir} must live on a PersistentVolumeClaim"
    service = find(objects, "Service", workload["spec"]["serviceName"])
    assert service is not None and service["spec"].get("clusterIP") == "None", "StatefulSet needs a headless Service"
    policy = workload["spec"].get("persistentVolumeClaimRetentionPolicy", {})
    assert policy.get("whenDeleted", "Retain") == "Retain" and policy.get("whenScaled", "Retain") == "Retain"


def test_stateless_services_are_deployments_with_a_service_account(objects: list[dict[str, Any]]) -> None:
    for name, workload in oncelog_workloads(objects).items():
        pod = workload["spec"]["template"]["spec"]
        account = find(objects, "ServiceAccount", pod.get("serviceAccountName", ""))
        assert account is not None, f"{name} needs its own ServiceAccount"
        # the services never call the Kubernetes API, so their pods carry no token
        assert pod.get("automountServiceAccountToken") is False
        if name != "partition-storage":
            assert workload["kind"] == "Deployment", name


def test_txn_coordinator_runs_at_least_two_replicas(objects: list[dict[str, Any]]) -> None:
    assert oncelog_workloads(objects)["txn-coordinator"]["spec"]["replicas"] >= 2


def test_prod_runs_at_least_as_many_replicas_as_dev() -> None:
    dev, prod = (oncelog_workloads(render(K8S / "overlays" / o)) for o in OVERLAYS)
    for name in dev:
        assert prod[name]["spec"]["replicas"] >= dev[name]["spec"]["replicas"], name
    assert any(prod[n]["spec"]["replicas"] > dev[n]["spec"]["replicas"] for n in dev), "prod should scale out"


def test_prod_keeps_three_copies_on_three_machines_and_drains_one_at_a_time(prod: list[dict[str, Any]]) -> None:
    """Issue 15 item 12: three storage replicas, never two on one machine, a disruption budget of one, and
    replication factor 3 for topics created without one."""
    storage = oncelog_workloads(prod)["partition-storage"]
    assert storage["spec"]["replicas"] >= 3
    pod = storage["spec"]["template"]
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert matches(term["labelSelector"], pod["metadata"]["labels"]), "repels its own pods"
    (budget,) = [
        b for b in of_kind(prod, "PodDisruptionBudget") if matches(b["spec"]["selector"], pod["metadata"]["labels"])
    ]
    assert budget["spec"]["maxUnavailable"] == 1
    (config,) = [c for c in of_kind(prod, "ConfigMap") if c["metadata"]["name"].startswith("oncelog-config")]
    assert config["data"]["ONCELOG_DEFAULT_REPLICATION_FACTOR"] == "3"


# ---- probes, ports, shutdown -----------------------------------------------------------------------------------


def test_services_have_native_grpc_probes(objects: list[dict[str, Any]]) -> None:
    for name in oncelog_workloads(objects):
        _, container, env = service_env(objects, name)
        # native gRPC probes speak plaintext only: with TLS on they must use the plaintext health-only listener
        health_listen = env.get(settings_env(name, "health_listen"), "")
        if env.get("ONCELOG_TLS_CERT"):
            assert health_listen, f"{name} serves TLS, so its probes need {settings_env(name, 'health_listen')}"
        probe_port = port_of(health_listen or setting_value(name, env, "listen"))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert probe in container, f"{name} has no {probe}"
            assert set(container[probe]) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}, (
                f"{name} {probe} must use the native grpc.health.v1 check"
            )
            assert container[probe]["grpc"]["port"] == probe_port, f"{name} {probe} probes another port"


def test_container_ports_match_listen_advertise_and_services(objects: list[dict[str, Any]]) -> None:
    services = [o for o in objects if o["kind"] == "Service"]
    for name in oncelog_workloads(objects):
        workload, container, env = service_env(objects, name)
        listen = setting_value(name, env, "listen")
        assert listen.rsplit(":", 1)[0] in ("0.0.0.0", "[::]"), f"{name} must listen on all interfaces, not {listen}"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports.get("grpc") == port_of(listen), f"{name}: container port 'grpc' differs from {listen}"
        advertise = setting_value(name, env, "advertise")
        assert port_of(advertise) == port_of(listen), f"{name} advertises {advertise} but listens on {listen}"
        assert "$(" not in advertise and not advertise.startswith(("0.0.0.0", "127.")), f"{name}: {advertise}"
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        selecting = [s for s in services if selects(s["spec"].get("selector", {}), pod_labels)]
        assert len(selecting) == 1, f"{name} must be selected by exactly one Service"
        by_name = {p["name"]: p for p in selecting[0]["spec"]["ports"]}
        extra = EXTRA_SERVICE_PORTS.get(name, {})
        assert set(by_name) == {"grpc", *extra}, f"{name}: Service ports {sorted(by_name)}"
        for port_name, field_name in extra.items():
            port = port_of(setting_value(name, env, field_name))
            assert ports.get(port_name) == port and by_name[port_name]["port"] == port, f"{name}: port {port_name}"
        service_port = by_name["grpc"]
        assert service_port["port"] == port_of(listen), "clients use the same port inside and outside the pod"
        assert service_port["targetPort"] in ("grpc", port_of(listen))


def test_termination_grace_exceeds_the_drain(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    for name in oncelog_workloads(objects):
        workload, _, env = service_env(objects, name)
        settings = settings_class(service_modules()[name]).from_env(with_mounted_files(env, tmp_path))
        drain = settings.drain_delay_s + settings.shutdown_grace_s
        grace = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > drain, f"{name}: SIGKILL after {grace}s would cut a {drain}s drain short"


# ---- configuration -------------------------------------------------------------------------------------------------


def test_every_setting_a_service_reads_is_provided_or_safe(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    for name, module in service_modules().items():
        _, _, env = service_env(objects, name)
        cls = settings_class(module)
        known = {env_name(cls.ENV_PREFIX, f) for f in dataclasses.fields(cls)}
        for field in dataclasses.fields(cls):
            variable = env_name(cls.ENV_PREFIX, field)
            has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            required = CATALOG_FREE.get(name, CLUSTER_REQUIRED_FIELDS[3:]) + CLUSTER_REQUIRED_FIELDS[:3]
            if field.name in required or not has_default:
                assert variable in env, f"{name} reads {variable}, whose default does not work in a pod"
        unknown = {k for k in env if k.startswith("ONCELOG_")} - known - PENDING_VARIABLES
        assert not unknown, f"{name} is given variables no setting reads (misspelt?): {sorted(unknown)}"
        unresolved = {k: v for k, v in env.items() if _REF.search(v)}
        assert not unresolved, f"{name}: $(VAR) references to undefined variables: {unresolved}"
        # the service's own loader: types parse and validate() passes, exactly as at process start
        cls.from_env(with_mounted_files(env, tmp_path))


def test_shared_configmap_holds_only_oncelog_and_otel_variables(objects: list[dict[str, Any]]) -> None:
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("oncelog-config")]
    assert config["data"]
    assert all(k.startswith(("ONCELOG_", "OTEL_")) for k in config["data"]), sorted(config["data"])


def test_dev_points_every_service_at_in_cluster_datastores() -> None:
    objects = render(K8S / "overlays" / "dev")
    service_ports = {
        s["metadata"]["name"]: {p["port"] for p in s["spec"]["ports"]} for s in objects if s["kind"] == "Service"
    }
    for name in service_modules():
        _, _, env = service_env(objects, name)
        for variable in ("ONCELOG_DATABASE_URL", "ONCELOG_REDIS_URL", "OTEL_EXPORTER_OTLP_ENDPOINT"):
            if variable == "ONCELOG_DATABASE_URL" and name in CATALOG_FREE:
                continue
            url = urlsplit(env[variable])
            assert url.port in service_ports.get(url.hostname or "", set()), (
                f"{name}: {variable} points at {url.hostname}:{url.port}, which no Service in the overlay serves"
            )


def test_prod_uses_external_datastores_and_mounts_tls() -> None:
    objects = render(K8S / "overlays" / "prod")
    names = {w["metadata"]["name"] for w in workloads(objects)}
    assert not names & {"postgresql", "redis"}, "prod uses external PostgreSQL and Redis"
    assert not [o for o in objects if o["kind"] == "Secret"], "prod Secrets are created out of band, never rendered"
    for name in service_modules():
        workload, container, env = service_env(objects, name)
        if name not in CATALOG_FREE:
            assert urlsplit(env["ONCELOG_DATABASE_URL"]).scheme.startswith("postgresql")
        secret_volumes = {
            v["name"]: v["secret"]["secretName"]
            for v in workload["spec"]["template"]["spec"]["volumes"]
            if "secret" in v
        }
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        files = dict.fromkeys(("ONCELOG_TLS_CERT", "ONCELOG_TLS_KEY", "ONCELOG_TLS_CA"), "oncelog-tls")
        if name == "kafka_gateway":  # the Kafka listener's own certificate
            files.update(
                dict.fromkeys(
                    ("ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_CERT", "ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_KEY"), "oncelog-kafka-tls"
                )
            )
        for variable, secret in files.items():
            directory, _, key = env[variable].rpartition("/")
            assert secret_volumes.get(mounts.get(directory, "")) == secret, f"{name}: {variable} is not mounted"
            assert key in EXTERNAL_SECRETS[secret], f"{name}: {variable} names no key of Secret {secret}"


# ---- hardening, resources, labels, disruption ------------------------------------------------------------------


def test_pods_meet_the_restricted_pod_security_standard(overlay: str, objects: list[dict[str, Any]]) -> None:
    namespace = find(objects, "Namespace", "oncelog")
    assert namespace is not None
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    services = service_modules()
    for workload in workloads(objects):
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        pod_security = pod.get("securityContext", {})
        assert not (pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC")), name
        assert not any("hostPath" in v for v in pod.get("volumes", [])), name
        for container in containers(workload):
            security = container.get("securityContext", {})
            where = f"{name}/{container['name']}"
            assert security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is True, where
            assert security.get("runAsUser", pod_security.get("runAsUser", 1)) != 0, where
            assert security.get("allowPrivilegeEscalation") is False, where
            assert not security.get("privileged"), where
            assert security.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not security.get("capabilities", {}).get("add"), where
            seccomp = security.get("seccompProfile", pod_security.get("seccompProfile", {}))
            assert seccomp.get("type") == "RuntimeDefault", where
            read_only = security.get("readOnlyRootFilesystem") is True
            assert read_only or (name in services and overlay in WRITABLE_ROOT_ALLOWED), f"{where}: writable root fs"
            if name in services:
                mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
                volumes = {v["name"]: v for v in pod.get("volumes", [])}
                assert "emptyDir" in volumes.get(mounts.get("/tmp", ""), {}), f"{where}: /tmp must be an emptyDir"


def test_containers_set_requests_and_limits(objects: list[dict[str, Any]]) -> None:
    for workload in workloads(objects):
        for container in containers(workload):
            where = f"{workload['metadata']['name']}/{container['name']}"
            resources = container.get("resources", {})
            for resource in ("cpu", "memory"):
                request = resources.get("requests", {}).get(resource)
                limit = resources.get("limits", {}).get(resource)
                assert request is not None and limit is not None, f"{where}: {resource} request and limit"
                assert quantity(limit) >= quantity(request), f"{where}: {resource} limit below request"


def test_objects_carry_the_standard_labels(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/part-of") == "oncelog", f"{obj['kind']}/{obj['metadata']['name']}"
    for workload in workloads(objects):
        name = workload["metadata"]["name"]
        template_labels = workload["spec"]["template"]["metadata"]["labels"]
        for labels in (workload["metadata"]["labels"], template_labels):
            assert labels.get("app.kubernetes.io/name") == name
            assert labels.get("app.kubernetes.io/component"), f"{name} needs app.kubernetes.io/component"
        assert matches(workload["spec"]["selector"], template_labels), f"{name}: selector misses its own pods"


def test_every_oncelog_workload_has_a_disruption_budget_that_allows_drains(objects: list[dict[str, Any]]) -> None:
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    for name, workload in oncelog_workloads(objects).items():
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        (budget,) = [b for b in budgets if matches(b["spec"]["selector"], pod_labels)]
        spec = budget["spec"]
        if "maxUnavailable" in spec:
            assert spec["maxUnavailable"] >= 1, f"{name}: maxUnavailable 0 blocks every node drain"
        else:
            assert spec["minAvailable"] < workload["spec"]["replicas"], f"{name}: minAvailable blocks every drain"


def test_network_policies_name_ports_the_selected_pods_expose(objects: list[dict[str, Any]]) -> None:
    pods = [
        (
            w["spec"]["template"]["metadata"]["labels"],
            {p.get("name") for c in containers(w) for p in c.get("ports", [])},
        )
        for w in workloads(objects)
    ]
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        selected = [ports for labels, ports in pods if matches(policy["spec"]["podSelector"], labels)]
        for rule in policy["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                if isinstance(port.get("port"), str) and selected:
                    assert all(port["port"] in ports for ports in selected), (
                        f"NetworkPolicy {policy['metadata']['name']}: a selected pod has no port {port['port']}"
                    )


# ---- observability -------------------------------------------------------------------------------------------------


def test_dev_grafana_dashboards_parse_and_use_provisioned_datasources() -> None:
    objects = render(K8S / "overlays" / "dev")
    provisioning = next(o for o in objects if o["metadata"]["name"].startswith("grafana-provisioning"))
    provisioned = {d["uid"] for d in yaml.safe_load(provisioning["data"]["datasources.yaml"])["datasources"]}
    dashboards = next(o for o in objects if o["metadata"]["name"].startswith("grafana-dashboards"))
    assert dashboards["data"], "the dev overlay provisions the oncelog dashboards"
    for file_name, text in dashboards["data"].items():
        dashboard = json.loads(text)
        assert dashboard["uid"] and dashboard["title"], file_name
        # a datasource variable per plugin type, so a Grafana with other datasource uids picks its own
        variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", []) if v["type"] == "datasource"}
        used = [
            ds
            for panel in dashboard["panels"]
            for ds in [panel.get("datasource")] + [t.get("datasource") for t in panel.get("targets", [])]
            if isinstance(ds, dict)
        ]
        assert used, file_name
        for ds in used:
            match = re.fullmatch(r"\$\{(\w+)\}", ds["uid"])
            assert match, f"{file_name}: hard-coded datasource uid {ds['uid']!r}; use a datasource variable"
            variable = variables.get(match.group(1))
            assert variable is not None, f"{file_name}: no datasource variable {match.group(1)!r}"
            assert variable["query"] == ds["type"], f"{file_name}: ${{{match.group(1)}}} is not a {ds['type']} source"
            assert variable["current"]["value"] in provisioned, f"{file_name}: its default is not provisioned"


# ---- prometheus-operator component ---------------------------------------------------------------------------------
# The custom resources have no bundled OpenAPI schema, so their rules are checked against the metric catalog
# (oncelog.telemetry.metrics) and docs/operations.md.

RUNBOOK = ROOT / "docs" / "operations.md"
SCRAPE_SERIES = {"up"}  # written by Prometheus for every target
PROMQL_WORDS = {"sum", "by", "le", "and", "min_over_time", "increase", "rate", "histogram_quantile", "labels", "value"}


@pytest.fixture(scope="module")
def prod() -> list[dict[str, Any]]:
    return render(K8S / "overlays" / "prod")


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_every_oncelog_pod_serves_metrics_on_the_port_the_pod_monitor_scrapes(prod: list[dict[str, Any]]) -> None:
    [monitor] = of_kind(prod, "PodMonitor")
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    names = set(monitor["spec"]["selector"]["matchExpressions"][0]["values"])
    scraped = [w for w in workloads(prod) if w["metadata"]["name"] in names]
    assert (
        {w["metadata"]["name"] for w in scraped}
        == names
        == {
            "pid-allocator",
            "txn-coordinator",
            "group-offsets",
            "partition-storage",
        }
    )
    for workload in scraped:
        [container] = containers(workload)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["ONCELOG_METRICS_LISTEN"] == f"0.0.0.0:{ports[endpoint['port']]}", workload["metadata"]["name"]


def alerts(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    [rule] = of_kind(objects, "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_alerts_query_only_series_oncelog_exports(prod: list[dict[str, Any]]) -> None:
    known = SCRAPE_SERIES | {series for m in CATALOG for series in m.prometheus_series}
    labels = {label for m in CATALOG for label in m.prometheus_labels} | {"job", "pod", "container", "le"}
    for alert in alerts(prod):
        expr = alert["expr"]
        selectors = re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{([^}]*)\})?\s*(?:\[|\)|>|==|$| and)", expr)
        series = {name for name, _ in selectors if name not in PROMQL_WORDS and not name.isdigit()}
        assert series, alert["alert"]
        assert series <= known, f"{alert['alert']} queries {sorted(series - known)}, which nothing exports"
        used = {m.split("=")[0].strip() for _, body in selectors for m in body.split(",") if body}
        used |= set(re.findall(r"by \(([^)]*)\)", expr))
        assert used <= labels, f"{alert['alert']} uses labels {sorted(used - labels)}"


def test_every_alert_has_a_runbook_section(prod: list[dict[str, Any]]) -> None:
    headings = {
        re.sub(r"[^a-z0-9-]", "", line.lstrip("#").strip().lower().replace(" ", "-"))
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("#")
    }
    for alert in alerts(prod):
        anchor = alert["annotations"]["runbook"].split("#", 1)[1]
        assert anchor == alert["alert"].lower(), alert["alert"]
        assert anchor in headings, f"docs/operations.md has no section for {alert['alert']}"
        assert alert["labels"]["severity"] in ("critical", "warning")


# ---- external listener -----------------------------------------------------------------------------------------------


def test_every_storage_node_has_an_external_service_at_its_advertised_external_address(
    prod: list[dict[str, Any]],
) -> None:
    """docs/design/external-listener.md §3: a LoadBalancer per storage pod, named by the address the pod advertises."""
    workload, container, env = service_env(prod, "partition-storage")
    listen = setting_value("partition-storage", env, "external_listen")
    advertised = setting_value("partition-storage", env, "external_advertise")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["external"] == port_of(listen) and listen.startswith("0.0.0.0:")
    domain = advertised.split(":")[0].split(".", 1)[1]  # as resolved for pod 0: <pod name>.<domain>
    assert "$(" not in advertised and domain
    external = {
        s["spec"]["selector"]["statefulset.kubernetes.io/pod-name"]: s
        for s in of_kind(prod, "Service")
        if "statefulset.kubernetes.io/pod-name" in s["spec"].get("selector", {})
    }
    pods = [f"{workload['metadata']['name']}-{i}" for i in range(workload["spec"]["replicas"])]
    assert sorted(external) == pods, "one external Service per storage pod, no more"
    for pod, service in external.items():
        assert service["spec"]["type"] in ("LoadBalancer", "NodePort")
        [port] = service["spec"]["ports"]
        assert (port["targetPort"], port["port"]) == ("external", port_of(advertised)), pod
        hostname = service["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/hostname"]
        assert hostname == f"{pod}.{domain}", f"{pod} advertises {pod}.{domain} but its Service is named {hostname}"
