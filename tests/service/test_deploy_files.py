"""deploy/docker and deploy/kubernetes (issue 19) against the files they run, and the bcrypt rule of
docs/operations.md ("Credentials") on a real nats-server.

No Docker daemon or Kubernetes cluster is needed (none is on the project's machines): the compose
file and the manifests are read as YAML and checked against the repository (the cluster files they
mount, the wheel's packages the Dockerfile copies, no secret in the examples). accounts.conf runs
on a real nats-server with real bcrypt hashes, written as the docs say (inside double quotes).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
import warnings
from pathlib import Path

import anyio
import nats
import pytest
import yaml

from services.common.natsserver import find_nats_server
from tests.service.natsconf import free_port, nats_server

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
KUBERNETES = ROOT / "deploy" / "kubernetes"


def test_the_dockerfile_copies_what_the_wheel_is_built_from() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    copied = {source for line in dockerfile.splitlines() if line.startswith("COPY ")
              for source in line.split()[1:-1]}
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]
                   ["wheel"]["packages"])
    assert packages <= copied, f"the wheel's packages {packages} are not all copied ({copied})"
    assert {"pyproject.toml", "README.md"} <= copied  # the project and its readme
    assert 'ENTRYPOINT ["poolwise"]' in dockerfile and "USER poolwise" in dockerfile
    # the .dockerignore lets through exactly what is copied
    allowed = {line[1:] for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
               if line.startswith("!")}
    assert packages | {"pyproject.toml", "README.md"} == allowed


def test_compose_runs_the_cluster_files_and_the_services() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())  # `<<:` merges are YAML's
    services = compose["services"]
    for n in (1, 2, 3):
        node = services[f"n{n}"]
        config = node["command"][-1]
        assert config == f"/etc/nats/poolwise/cluster-n{n}.conf"
        mount = next(v for v in node["volumes"] if v.endswith(":/etc/nats/poolwise:ro"))
        assert (DOCKER / mount.split(":")[0] / f"cluster-n{n}.conf").is_file()
        # every variable the cluster file reads is set (one left unset stops nats-server)
        cluster_file = (ROOT / "deploy" / "nats" / f"cluster-n{n}.conf").read_text()
        wanted = set(re.findall(r"\$(POOLWISE_NATS_\w+)", cluster_file))
        assert wanted <= set(node["environment"]), wanted - set(node["environment"])
        assert f"nats-route://n{n}:6222" in node["environment"]["POOLWISE_NATS_ROUTES"]
    for name in ("tree", "admission", "preemption"):
        assert services[name]["command"] == ["serve", name, "--replicas", "3"]
        assert services[name]["env_file"] == ["service.env"]
        # each container serves its health on 8080, asked by its healthcheck
        assert services[name]["environment"]["POOLWISE_HTTP_PORT"] == "8080"
        assert "http://127.0.0.1:8080/readyz" in services[name]["healthcheck"]["test"][-1]
    # the examples hold placeholders only, and the real copies are kept out of git
    for name in ("nats", "service", "operator"):
        values = [line.split("=", 1)[1] for line in (DOCKER / f"{name}.env.example").read_text().splitlines()
                  if "=" in line and not line.startswith("#")]
        assert values and all("REPLACE" in v or v == "3" for v in values), values
    assert "*.env" in (DOCKER / ".gitignore").read_text().split()


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="no docker-compose here")
@pytest.mark.parametrize("files", [["compose.yaml"], ["compose.yaml", "compose.per-tree.yaml"]],
                         ids=["default", "per-tree"])
def test_docker_compose_accepts_the_files_as_given(tmp_path: Path, files: list[str]) -> None:
    """`docker-compose config` (the v1 tool Debian ships) parses and resolves the files with the
    examples copied to the .env files they name, as compose.yaml's header says it did (a top-level
    `name:` made it refuse the file)."""
    for found in DOCKER.iterdir():
        if found.is_file():
            shutil.copy(found, tmp_path / found.name)
    for name in ("nats", "service", "operator"):
        shutil.copy(DOCKER / f"{name}.env.example", tmp_path / f"{name}.env")
    args = [arg for f in files for arg in ("-f", f)]
    done = subprocess.run(["docker-compose", *args, "config", "--quiet"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_kubernetes_examples_parse_and_run_the_cluster_files() -> None:
    docs = [d for f in ("nats.yaml", "poolwise.yaml") for d in yaml.safe_load_all((KUBERNETES / f).read_text())]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("StatefulSet", "nats"), ("Deployment", "poolwise-admission"), ("Deployment", "poolwise-preemption"),
            ("StatefulSet", "poolwise-tree")} <= kinds
    nats_set = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "nats")
    script = nats_set["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert "$(" not in script  # Kubernetes would take $(...) for its own variable syntax
    for ordinal in range(nats_set["spec"]["replicas"]):
        picked = subprocess.run(["sh", "-c", script.replace("exec nats-server --config", "echo")],
                                env={"HOSTNAME": f"nats-{ordinal}"}, capture_output=True, text=True, check=True)
        path = Path(picked.stdout.strip())
        assert path.name == f"cluster-n{ordinal + 1}.conf" and (ROOT / "deploy" / "nats" / path.name).is_file()
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "poolwise")["data"]
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet") and d["metadata"]["name"].startswith("poolwise-"):
            service = d["metadata"]["name"].removeprefix("poolwise-")
            container = d["spec"]["template"]["spec"]["containers"][0]
            assert container["args"] == ["serve", service, "--replicas", "3"]
            # the probes ask the health routes on the port the ConfigMap makes the service serve
            assert container["ports"] == [{"name": "http", "containerPort": int(config["POOLWISE_HTTP_PORT"])}]
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
            assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
            annotations = d["spec"]["template"]["metadata"]["annotations"]
            assert annotations["prometheus.io/port"] == config["POOLWISE_HTTP_PORT"]
    assert config["POOLWISE_HTTP_HOST"] == "0.0.0.0"  # the kubelet probes the pod's address, not its loopback


def test_the_systemd_units_serve_health_on_ports_of_their_own() -> None:
    ports = []
    for name in ("tree", "admission", "preemption"):
        unit = (ROOT / "deploy" / "systemd" / f"poolwise-{name}.service").read_text()
        command = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        found = re.search(r"--http-port (\d+)", command)
        assert found is not None, command
        ports.append(int(found.group(1)))
    assert len(set(ports)) == 3  # three services on one machine: three ports


def _bcrypt(password: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt  # in the standard library up to Python 3.12
        except ImportError:
            pytest.skip("no crypt module (Python 3.13+) to make a bcrypt hash with")
    if crypt.METHOD_BLOWFISH not in crypt.methods:
        pytest.skip("this libc's crypt has no bcrypt")
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2**4))


@pytest.mark.nats
def test_a_bcrypt_hash_in_the_environment_is_written_inside_double_quotes(tmp_path: Path) -> None:
    """docs/operations.md, "Credentials": a bare hash is taken for a variable reference and stops
    nats-server; inside double quotes each role signs in with its password, and a wrong one is refused."""
    passwords = {"SERVICE": "svc-pw", "SUBMITTER": "sub-pw", "OPERATOR": "op-pw"}
    hashes = {role: _bcrypt(pw) for role, pw in passwords.items()}
    config = 'listen: 127.0.0.1:{port}\njetstream { store_dir: "{store}" }\ninclude "accounts.conf"\n'

    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "accounts.conf").write_text((ROOT / "deploy" / "nats" / "accounts.conf").read_text())
    (bare / "server.conf").write_text(config.replace("{port}", str(free_port())).replace("{store}", str(bare / "js")))
    run = subprocess.run([find_nats_server(), "-c", str(bare / "server.conf")], capture_output=True, text=True,
                         timeout=30, env={f"{role}_PASSWORD_BCRYPT": h for role, h in hashes.items()})
    assert run.returncode != 0 and "variable reference" in run.stderr + run.stdout

    quoted = tmp_path / "quoted"
    quoted.mkdir()
    env = {f"{role}_PASSWORD_BCRYPT": f'"{h}"' for role, h in hashes.items()}
    with nats_server(quoted, config, env=env, include=["accounts.conf"]) as port:

        async def signs_in(user: str, password: str) -> bool:
            try:
                nc = await nats.connect(f"nats://{user}:{password}@127.0.0.1:{port}", allow_reconnect=False,
                                        max_reconnect_attempts=0, connect_timeout=5)
            except Exception:
                return False
            await nc.close()
            return True

        async def main() -> None:
            with anyio.fail_after(60):
                for role, password in passwords.items():
                    assert await signs_in(role.lower(), password), role
                assert not await signs_in("service", "wrong")

        anyio.run(main)
