"""Strait's deployment files, checked with the tools platform teams use on them.

- The Helm chart (deploy/helm/strait), with its default values and a production-shaped values
  file, renders (`helm template`) to objects that kubeconform accepts against the Kubernetes JSON
  schemas of the oldest and newest release the chart supports (strict: unknown fields are
  errors); the configuration it renders loads in Strait with the environment its pods get, and
  every command line it gives a container is one Strait's CLI accepts.
- The systemd units (deploy/systemd) pass `systemd-analyze verify` and stay within an exposure
  level of 2.0 of `systemd-analyze security`.
- The container image (deploy/image) runs a controller and a worker that copy records between
  the sandbox's clusters (host network, 127.0.0.1 only).
- The units run Strait under systemd itself: a container booting Debian's systemd, with the
  image's /opt/strait, starts both units with all their hardening, copies records, and a stopped
  worker drains and exits cleanly.

helm and kubeconform are built by scripts/deploy_tools.py into ~/.cache/strait/tools on the first
run (about three minutes on two cores), the image by deploy/image/build.sh (about 40 s on a quiet
machine, its Debian base included). Outside CI a missing tool skips its tests with the reason;
in CI it fails them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from strait import clients
from strait.config import load_config
from strait.demo import create_topic, wait_until
from strait.sandbox import Sandbox
from strait.web.client import ApiError, ControllerClient
from tests.integration.verify import copied_counts

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "strait"
UNITS = ROOT / "deploy" / "systemd"
VALUES = {"default": None, "production": CHART / "ci" / "production-values.yaml"}
STRAIT = Path(sys.executable).with_name("strait")
# An address a pod could have, for $(POD_IP) in the environment the chart gives containers.
POD_IP = "10.1.2.3"


def missing(reason: str) -> None:
    """Fail in CI, where every tool must be there; skip elsewhere, saying what is missing."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "deploy_tools.py")],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if done.returncode != 0:
        missing(f"scripts/deploy_tools.py could not provide helm and kubeconform:\n{done.stderr}")
    paths: dict[str, str] = json.loads(done.stdout)
    return paths


def helm(tools: dict[str, str], *args: str) -> str:
    done = subprocess.run([tools["helm"], *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def values_args(name: str) -> list[str]:
    file = VALUES[name]
    return ["--values", str(file)] if file is not None else []


@pytest.fixture(scope="module", params=sorted(VALUES))
def rendered(request: pytest.FixtureRequest, tools: dict[str, str]) -> tuple[str, str, list[dict[str, Any]]]:
    """(values name, manifests as helm wrote them, the objects)."""
    name: str = request.param
    text = helm(tools, "template", "strait", str(CHART), "--namespace", "replication", *values_args(name))
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    return name, text, objects


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def containers(objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, container) for every container of every Deployment and StatefulSet."""
    return [
        (o, c)
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    ]


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(NAME) expansion of args and env values."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)


def pod_environment(workload: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The variables the container would see, Secrets' values made up."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
        elif "fieldRef" in var["valueFrom"]:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            env[var["name"]] = {"metadata.name": f"{workload['metadata']['name']}-0", "status.podIP": POD_IP}[path]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = f"secret-{ref['name']}-{ref['key']}"
    return env


def test_the_chart_lints(tools: dict[str, str]) -> None:
    for name in VALUES:
        helm(tools, "lint", "--strict", str(CHART), *values_args(name))


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("workerPools.VIP_1.replicas=1", "VIP_1"),  # a pool name that cannot name a StatefulSet
        ("config.zookeeper.connect=zk:2181", "/config/zookeeper"),  # coordination is the chart's
        ("secretEnv[0].name=SRC_PASSWORD", "secretName"),
        ("logFormat=xml", "/logFormat"),
    ],
)
def test_the_chart_refuses_values_it_cannot_deploy(tools: dict[str, str], setting: str, said: str) -> None:
    done = subprocess.run(
        [tools["helm"], "template", "strait", str(CHART), "--set", setting],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert said in done.stderr, done.stderr


def test_every_manifest_is_valid_for_kubernetes(
    rendered: tuple[str, str, list[dict[str, Any]]], tools: dict[str, str], tmp_path: Path
) -> None:
    name, text, objects = rendered
    manifests = tmp_path / f"{name}.yaml"
    manifests.write_text(text)
    schemas = Path(tools["schemas"])
    location = f"{schemas}/{{{{ .NormalizedKubernetesVersion }}}}-local{{{{ .StrictSuffix }}}}"
    location += "/{{ .ResourceKind }}{{ .KindSuffix }}.json"
    for version in tools["kubernetes_versions"].split(","):
        command = [tools["kubeconform"], "-strict", "-summary", "-output", "json", "-kubernetes-version", version]
        done = subprocess.run(
            [*command, "-schema-location", location, str(manifests)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        report = json.loads(done.stdout)
        assert done.returncode == 0, f"{name} values, Kubernetes {version}: {json.dumps(report['resources'], indent=1)}"
        # Nothing skipped for want of a schema: every object was checked.
        assert report["summary"] == {"valid": len(objects), "invalid": 0, "errors": 0, "skipped": 0}, report


def test_controllers_elect_and_workers_have_stable_ids(rendered: tuple[str, str, list[dict[str, Any]]]) -> None:
    name, _, objects = rendered
    (controller,) = of_kind(objects, "Deployment")
    assert controller["spec"]["replicas"] == (2 if name == "default" else 3)
    pod = controller["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["args"][0] == "controller"
    assert "--id=$(POD_NAME)" in container["args"]
    for probe in ("readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"]) == ("/health", "http")
        assert get["scheme"] == ("HTTP" if name == "default" else "HTTPS")
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(container["ports"][0]["containerPort"])

    (api,) = [s for s in of_kind(objects, "Service") if s["spec"].get("clusterIP") != "None"]
    assert api["spec"]["selector"] == pod["metadata"]["labels"]
    assert api["spec"]["ports"][0]["targetPort"] == "http"

    pools = {s["metadata"]["labels"]["strait.io/pool"]: s for s in of_kind(objects, "StatefulSet")}
    assert set(pools) == ({"default"} if name == "default" else {"default", "vip"})
    for pool, workers in pools.items():
        (container,) = workers["spec"]["template"]["spec"]["containers"]
        assert container["args"][:1] == ["worker"]
        assert "--id=$(POD_NAME)" in container["args"]
        assert f"--pool={pool}" in container["args"]
        env = pod_environment(workers, container)
        assert env["STRAIT_OBSERVABILITY__WORKER_METRICS_LISTEN"] == f"{POD_IP}:9100"
        probe = container["livenessProbe"]
        # With a metrics token the kubelet cannot read /metrics: it checks the port instead.
        if name == "default":
            assert probe["httpGet"]["path"] == "/metrics"
        else:
            assert probe["tcpSocket"] == {"port": "metrics"}
        assert workers["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    if name == "production":
        assert pools["vip"]["spec"]["replicas"] == 2
        assert pools["vip"]["spec"]["template"]["spec"]["nodeSelector"] == {"node-pool": "kafka-vip"}
        assert pools["default"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 90


def test_every_container_command_line_is_one_strait_accepts(rendered: tuple[str, str, list[dict[str, Any]]]) -> None:
    _, _, objects = rendered
    for workload, container in containers(objects):
        env = pod_environment(workload, container)
        args = [expand(a, env) for a in container["args"]]
        # --help after the others: an unknown or malformed option is still an error.
        done = subprocess.run([str(STRAIT), *args, "--help"], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"{workload['metadata']['name']}: strait {' '.join(args)}:\n{done.stderr}"


def test_the_rendered_configuration_loads_in_strait(
    rendered: tuple[str, str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    name, _, objects = rendered
    (config_map,) = of_kind(objects, "ConfigMap")
    text = config_map["data"]["strait.yaml"]
    # The files the pods mount (Secrets), made up under tmp_path.
    mounted = sorted(set(re.findall(r"/etc/strait/[\w./-]+", text)))
    for path in mounted:
        file = tmp_path / path.lstrip("/")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(f"secret-from-{file.name}\n")
        file.chmod(0o440)
    config_file = tmp_path / "strait.yaml"
    config_file.write_text(text.replace("/etc/strait/", f"{tmp_path}/etc/strait/"))
    for workload, container in containers(objects):
        config = load_config(config_file, pod_environment(workload, container))
        if name == "default":
            assert config.coordination.zookeeper is not None
            assert config.coordination.zookeeper.root == "/strait"
        else:  # coordination on the destination cluster: no ZooKeeper to run
            assert config.coordination.kafka is not None
            assert config.coordination.kafka.cluster == "dst"
        # `strait topics ... --config` in a controller pod reaches the API on the pod's loopback.
        assert config.controller.listen == "127.0.0.1:9000"
        if container["name"] == "worker":
            assert config.observability.worker_metrics_listen == f"{POD_IP}:9100"
    if name == "production":
        config = load_config(config_file, pod_environment(*containers(objects)[0]))
        assert config.clusters["src"]["sasl.password"] == "secret-strait-kafka-src-password"
        assert config.controller.api_token == "secret-from-token"
        assert config.controller.tls is not None
        assert config.observability.metrics_token == "secret-from-token"
        assert config.worker.drain_timeout_s == 45  # extraEnv overrides a key
        assert [r.name for r in config.routes] == ["orders", "payments"]


def test_secrets_are_referenced_never_written(rendered: tuple[str, str, list[dict[str, Any]]]) -> None:
    name, _, objects = rendered
    assert not of_kind(objects, "Secret")
    if name != "production":
        return
    (controller,) = of_kind(objects, "Deployment")
    spec = controller["spec"]["template"]["spec"]
    secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert secrets == {"strait-kafka-tls", "strait-api-token", "strait-api-tls", "strait-metrics-token"}
    assert all(v["secret"]["defaultMode"] == 0o440 for v in spec["volumes"] if "secret" in v)
    (container,) = spec["containers"]
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert refs == {"SRC_PASSWORD": {"name": "strait-kafka", "key": "src-password"}}


# --- systemd -------------------------------------------------------------------------------


@pytest.fixture
def units(tmp_path: Path) -> Path:
    """The units, their ExecStart pointing at this checkout's strait (verify needs it to exist)."""
    if shutil.which("systemd-analyze") is None:
        missing("systemd-analyze is missing (Debian: apt-get install systemd)")
    for unit in UNITS.glob("*.service"):
        (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/strait/bin/strait", str(STRAIT)))
    return tmp_path


def analyze(units: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", *args], cwd=units, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_systemd_units_verify(units: Path) -> None:
    for unit in ("strait-controller.service", "strait-worker@w1.service"):
        done = analyze(units, "verify", str(units / unit))
        # verify exits 0 on an unknown key or a bad value, and says so on stderr.
        assert (done.returncode, done.stderr) == (0, ""), f"{unit}:\n{done.stderr}"


def test_the_systemd_units_are_hardened(units: Path) -> None:
    for unit in ("strait-controller.service", "strait-worker@w1.service"):
        done = analyze(units, "security", "--offline=yes", "--threshold=20", str(units / unit))
        assert done.returncode == 0, f"{unit} is exposed beyond 2.0:\n{done.stdout}"


def test_the_systemd_command_lines_are_ones_strait_accepts(units: Path) -> None:
    for unit, instance in (("strait-controller.service", ""), ("strait-worker@.service", "w1")):
        text = (units / unit).read_text()
        for key in ("ExecStart", "ExecReload"):
            assert re.search(rf"^{key}=", text, re.M), f"{unit} has no {key}"
        line = re.search(r"^ExecStart=(.*)$", text, re.M)
        assert line is not None
        args = line[1].replace("%H", "host-1").replace("%i", instance).split()
        done = subprocess.run([*args, "--help"], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"{unit}: {' '.join(args)}:\n{done.stderr}"
        assert "ExecReload=/bin/kill -HUP $MAINPID" in text


# --- container image -----------------------------------------------------------------------


def podman_limits() -> list[str]:
    """What podman needs on this kind of machine: runc (crun refuses hybrid cgroups), and limits
    within the caller's own (raising them needs CAP_SYS_RESOURCE)."""
    import resource

    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
    return ["--runtime", "runc", "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"]


def podman_run_args() -> list[str]:
    """`podman run` options of every container here: the host's network, on 127.0.0.1 only."""
    return [*podman_limits(), "--network", "host"]


def add_topic(port: int, topic: str, timeout_s: float = 60) -> None:
    """Add `topic` to route main, asking again while the source's metadata does not list it yet."""
    api = ControllerClient(f"http://127.0.0.1:{port}", timeout_s=30)
    errors: list[str] = []

    def add() -> bool:
        try:
            api.add_topic(topic, route="main")
        except ApiError as exc:
            errors.append(str(exc))
            return False
        return True

    assert wait_until(add, timeout_s), errors[-3:]


@pytest.fixture(scope="module")
def image() -> str:
    for tool in ("podman", "mmdebstrap", "runc"):
        if shutil.which(tool) is None:
            missing(f"{tool} is missing (Debian: apt-get install podman mmdebstrap runc)")
    started = time.monotonic()
    done = subprocess.run(
        [str(ROOT / "deploy" / "image" / "build.sh")], capture_output=True, text=True, timeout=1200, check=False
    )
    assert done.returncode == 0, f"deploy/image/build.sh failed:\n{done.stderr[-6000:]}"
    tag = done.stdout.strip().splitlines()[-1]
    size = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Size}}", tag], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(f"built {tag} in {time.monotonic() - started:.0f} s: {int(size) / 1e6:.0f} MB")
    return tag


@pytest.fixture
def containers_started() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in reversed(names):  # the worker first: it drains while the controller still runs
        subprocess.run(["podman", "stop", "--time", "30", name], capture_output=True, check=False)
        subprocess.run(["podman", "rm", "--force", name], capture_output=True, check=False)


def test_the_image_runs_a_controller_and_a_worker(
    image: str, sandbox: Sandbox, tmp_path: Path, containers_started: list[str]
) -> None:
    from strait.controller.server import free_port

    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    port = free_port()
    config = {
        "coordination": {"zookeeper": {"connect": sandbox.zookeeper, "root": f"/strait-image-{uuid.uuid4().hex[:8]}"}},
        "clusters": {"src": dict(src), "dst": dict(dst)},
        "routes": [{"name": "main", "source": "src", "destination": "dst"}],
        "controller": {"listen": f"127.0.0.1:{port}", "refresh_interval_s": 1},
        "worker": {"commit_interval_s": 0.5, "stats_interval_s": 1},
    }
    (tmp_path / "strait.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "strait.yaml").chmod(0o644)
    tmp_path.chmod(0o755)
    run = ["podman", "run", "--detach", *podman_run_args(), "--volume", f"{tmp_path}:/etc/strait:ro"]
    suffix = uuid.uuid4().hex[:6]
    for role, args in (("controller", ["--id", "c1"]), ("worker", ["--id", "image-w1"])):
        name = f"strait-test-{role}-{suffix}"
        done = subprocess.run(
            [*run, "--name", name, image, role, "--config", "/etc/strait/strait.yaml", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        containers_started.append(name)

    def logs() -> str:
        return "\n".join(
            f"--- {name}\n"
            + subprocess.run(["podman", "logs", name], capture_output=True, text=True, check=False).stderr[-3000:]
            for name in containers_started
        )

    api = ControllerClient(f"http://127.0.0.1:{port}", timeout_s=5)
    assert wait_until(lambda: api.call("GET", "/health")["leader"], 60), logs()
    assert wait_until(lambda: [w["state"] for w in api.call("GET", "/workers")] == ["active"], 60), logs()

    topic = f"image-{suffix}"
    create_topic(src, topic, 2)
    producer = clients.producer(src)
    for i in range(200):
        producer.produce(topic, key=str(i).encode(), value=b"x" * 100, partition=i % 2)
    assert producer.flush(30) == 0
    add_topic(port, topic)
    assert wait_until(lambda: sum(copied_counts(dst, topic, 2).values()) >= 200, 120), logs()
    assert copied_counts(dst, topic, 2) == {0: 100, 1: 100}
    for name in containers_started:  # the image's own user, not root
        uid = subprocess.run(["podman", "exec", name, "id", "-u"], capture_output=True, text=True, check=False)
        assert uid.stdout.strip() == "10001", uid.stderr


# --- the units under systemd -----------------------------------------------------------------

SYSTEMD_BASE = "localhost/strait-systemd-base:bookworm"


def debian_mirror() -> str:
    """This machine's Debian mirror, as deploy/image/build.sh uses it."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.is_file():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


@pytest.fixture(scope="module")
def systemd_image(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian with systemd as its init, the image's /opt/strait and the units installed."""
    work = tmp_path_factory.mktemp("systemd-image")
    exists = subprocess.run(["podman", "image", "exists", SYSTEMD_BASE], capture_output=True, check=False)
    if exists.returncode != 0:  # made once and kept, like the image's own base
        rootfs = work / "rootfs.tar"
        packages = "systemd,systemd-sysv,python3,python3-venv,ca-certificates"
        mmdebstrap = ["nice", "-n", "10", "mmdebstrap", "--variant=essential", "--mode=root", "--quiet"]
        subprocess.run(
            [*mmdebstrap, f"--include={packages}", "bookworm", str(rootfs), debian_mirror()],
            capture_output=True,
            check=True,
            timeout=900,
        )
        subprocess.run(["podman", "import", str(rootfs), SYSTEMD_BASE], capture_output=True, check=True)
        rootfs.unlink()
    for unit in UNITS.glob("*.service"):
        shutil.copy(unit, work / unit.name)
    (work / "Containerfile").write_text(
        f"FROM {image} AS strait\n"
        f"FROM {SYSTEMD_BASE}\n"
        "COPY --from=strait /opt/strait /opt/strait\n"
        "COPY strait-controller.service strait-worker@.service /etc/systemd/system/\n"
        'RUN echo "strait:x:10001:10001:Strait:/var/lib/strait:/usr/sbin/nologin" >> /etc/passwd'
        ' && echo "strait:x:10001:" >> /etc/group\n'
        'CMD ["/sbin/init"]\n'
    )
    tag = "localhost/strait-systemd-check:test"
    done = subprocess.run(
        ["podman", "build", "--pull=never", "--network", "none", *podman_limits(), "-t", tag, str(work)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    yield tag
    subprocess.run(["podman", "rmi", tag], capture_output=True, check=False)


def test_the_units_run_strait_under_systemd(
    systemd_image: str, sandbox: Sandbox, tmp_path: Path, containers_started: list[str]
) -> None:
    from strait.controller.server import free_port

    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    port = free_port()
    config = {
        "coordination": {"zookeeper": {"connect": sandbox.zookeeper, "root": f"/strait-units-{uuid.uuid4().hex[:8]}"}},
        "clusters": {"src": dict(src), "dst": {**dst, "client.id": "${env:DST_CLIENT_ID}"}},
        "routes": [{"name": "main", "source": "src", "destination": "dst"}],
        "controller": {"listen": f"127.0.0.1:{port}", "refresh_interval_s": 1},
        "worker": {"commit_interval_s": 0.5, "stats_interval_s": 1},
    }
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    (etc / "strait.yaml").write_text(yaml.safe_dump(config))
    (etc / "strait.yaml").chmod(0o644)
    # Root's alone: systemd reads it before dropping to the strait user, who could not.
    (etc / "strait.env").write_text("DST_CLIENT_ID=strait-under-systemd\n")
    (etc / "strait.env").chmod(0o600)
    name = f"strait-test-systemd-{uuid.uuid4().hex[:6]}"
    run = ["podman", "run", "--detach", "--systemd=always", *podman_run_args(), "--volume", f"{etc}:/etc/strait:ro"]
    done = subprocess.run(
        [*run, "--name", name, systemd_image],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    containers_started.append(name)

    def systemctl(*args: str) -> str:
        return subprocess.run(
            ["podman", "exec", name, "systemctl", *args], capture_output=True, text=True, timeout=120, check=False
        ).stdout.strip()

    def journal() -> str:
        return subprocess.run(
            ["podman", "exec", name, "journalctl", "--no-pager", "-o", "cat", "-n", "60"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout

    assert wait_until(lambda: systemctl("is-system-running") in ("running", "degraded"), 60), journal()
    systemctl("start", "strait-controller.service", "strait-worker@w1.service")
    api = ControllerClient(f"http://127.0.0.1:{port}", timeout_s=5)
    assert wait_until(lambda: api.call("GET", "/health")["leader"], 60), journal()
    assert wait_until(lambda: [w["id"] for w in api.call("GET", "/workers")] == ["w1"], 60), journal()

    # The worker runs as the strait user, without capabilities, under a system call filter.
    pid = systemctl("show", "--property=MainPID", "--value", "strait-worker@w1.service")
    status = subprocess.run(
        ["podman", "exec", name, "cat", f"/proc/{pid}/status"], capture_output=True, text=True, check=True
    ).stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["Uid"].split()[0] == "10001"
    assert int(fields["CapEff"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"

    topic = f"units-{uuid.uuid4().hex[:6]}"
    create_topic(src, topic, 2)
    producer = clients.producer(src)
    for i in range(200):
        producer.produce(topic, value=b"x" * 100, partition=i % 2)
    assert producer.flush(30) == 0
    add_topic(port, topic)
    assert wait_until(lambda: sum(copied_counts(dst, topic, 2).values()) >= 200, 120), journal()
    assert copied_counts(dst, topic, 2) == {0: 100, 1: 100}

    # systemctl stop drains the worker: it leaves cleanly and is not restarted.
    systemctl("stop", "strait-worker@w1.service")
    shown = systemctl("show", "--property=Result,ExecMainStatus,NRestarts", "strait-worker@w1.service")
    # Status 0: the worker exited after its drain (a signal would show as its number).
    assert dict(line.split("=", 1) for line in shown.splitlines()) == {
        "Result": "success",
        "ExecMainStatus": "0",
        "NRestarts": "0",
    }, journal()
    assert systemctl("is-active", "strait-controller.service") == "active", journal()
