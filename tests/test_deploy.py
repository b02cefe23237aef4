"""The deployment in deploy/: both kustomize overlays render, every resource
validates against the Kubernetes schemas offline (the RayCluster against the
KubeRay fields kept in the repo, its pod templates against the core schema),
every container command parses with specserve's own CLI, probes and Services
point at the ports the commands listen on, the draft pool sits behind a
headless Service the router looks up, and the images install the package as
README does (what they copy installs a specserve that runs) and run as a
non-root user with a health check."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from protos.server import ALIVE
from specserve.cli import build_parser

DEPLOY = Path(__file__).parent.parent / "deploy"
OVERLAYS = ["qwen3-8b", "cpu-demo", "qwen3-8b-tls"]
KUBERNETES_VERSION = "1.32.0"


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is needed to render deploy/kubernetes"
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "kubernetes" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def manifests(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(request.param)


def pod_templates(resource: dict[str, Any]) -> list[dict[str, Any]]:
    spec = resource.get("spec", {})
    if resource["kind"] == "RayCluster":
        groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
        return [g["template"] for g in groups]
    return [spec["template"]] if "template" in spec else []


def containers(manifests: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (r["metadata"]["name"], c)
        for r in manifests
        for t in pod_templates(r)
        for c in t["spec"]["containers"]
    ]


def config_values(manifests: list[dict[str, Any]]) -> dict[str, str]:
    (config,) = [r for r in manifests if r["kind"] == "ConfigMap"]
    return dict(config["data"])


def specserve_args(container: dict[str, Any], env: dict[str, str]) -> list[str] | None:
    """The container's specserve arguments with $(VAR)s expanded as the kubelet does."""
    if container.get("command") != ["specserve"]:
        return None
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"]]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_every_resource_validates_against_the_kubernetes_schemas(
    manifests: list[dict[str, Any]],
) -> None:
    kinds = sorted(r["kind"] for r in manifests)
    assert kinds.count("Deployment") == 3 and kinds.count("RayCluster") == 1
    schema = json.loads((DEPLOY / "kubernetes/schemas/raycluster-v1.schema.json").read_text())
    for resource in manifests:
        if resource["kind"] == "RayCluster":
            jsonschema.validate(resource, schema)
            for template in pod_templates(resource):
                kubernetes_validate.validate(
                    {
                        "apiVersion": "v1",
                        "kind": "PodTemplate",
                        "metadata": {"name": "t"},
                        "template": template,
                    },
                    KUBERNETES_VERSION,
                    strict=True,
                )
        else:
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def test_a_misspelt_field_fails_validation() -> None:
    (deployment, *_) = [r for r in render("cpu-demo") if r["kind"] == "Deployment"]
    deployment["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_every_command_parses_with_the_cli_and_probes_its_port(
    manifests: list[dict[str, Any]],
) -> None:
    env = config_values(manifests)
    parser = build_parser()
    seen = set()
    for owner, container in containers(manifests):
        args = specserve_args(container, env)
        if args is None:
            continue  # Ray's own containers: KubeRay starts them
        parser.parse_args(args)  # exits (fails the test) on any flag the CLI lacks
        seen.add(args[0])
        port = int(flag(args, "--port"))
        assert port in [p["containerPort"] for p in container["ports"]], owner
        for probe in ("readinessProbe", "livenessProbe"):
            check = container[probe]
            if "exec" in check:  # python -m protos.health_check HOST:PORT, over TLS
                assert f"127.0.0.1:{port}" in check["exec"]["command"], (owner, probe)
                assert (ALIVE in check["exec"]["command"]) == (probe == "livenessProbe"), owner
                continue
            probed = check["grpc"]["port"] if "grpc" in check else check["httpGet"]["port"]
            assert probed == port, f"{owner}: {probe} checks {probed}, listens on {port}"
            if probe == "livenessProbe" and "grpc" in check:  # not restarted for a lost peer
                assert check["grpc"].get("service") == ALIVE, owner
    assert seen == {"serve", "router", "draft-worker", "target-worker"}


def test_services_route_to_the_ports_the_clients_dial(manifests: list[dict[str, Any]]) -> None:
    env = config_values(manifests)
    services = {
        r["metadata"]["name"]: {p["port"]: p["targetPort"] for p in r["spec"]["ports"]}
        for r in manifests
        if r["kind"] == "Service"
    }
    listening = {
        args[0]: int(flag(args, "--port"))
        for _, c in containers(manifests)
        if (args := specserve_args(c, env)) is not None
    }
    dialled = {}
    for _, c in containers(manifests):
        args = specserve_args(c, env)
        if args and args[0] == "router":
            dialled["target-worker"] = flag(args, "--target-workers")
            dialled["draft-worker"] = flag(args, "--draft-workers")
        if args and args[0] == "serve":
            dialled["router"] = flag(args, "--router")
    for command, address in dialled.items():
        host, port = address.removeprefix("dns:///").rsplit(":", 1)
        assert services[host][int(port)] == listening[command], address


def test_the_router_finds_the_draft_pool_through_a_headless_service(
    manifests: list[dict[str, Any]],
) -> None:
    """So that scaling the draft Deployment changes the router's pool: the
    name resolves to every ready pod, and the router looks it up again."""
    env = config_values(manifests)
    (router,) = [
        args
        for _, c in containers(manifests)
        if (args := specserve_args(c, env)) is not None and args[0] == "router"
    ]
    name = flag(router, "--draft-workers").removeprefix("dns:///").rsplit(":", 1)[0]
    (draft_service,) = [
        r for r in manifests if r["kind"] == "Service" and r["metadata"]["name"] == name
    ]
    assert flag(router, "--draft-workers").startswith("dns:///")
    assert draft_service["spec"]["clusterIP"] == "None"


def test_the_config_map_holds_a_valid_speculative_config(manifests: list[dict[str, Any]]) -> None:
    from router.config import SpeculativeConfig

    env = config_values(manifests)
    spec = SpeculativeConfig.from_dict(json.loads(env["SPECULATIVE_CONFIG"]))
    assert spec.model == env["DRAFT_MODEL"]
    assert spec.num_speculative_tokens == int(env["NUM_SPECULATIVE_TOKENS"])


def test_the_gpu_example_is_the_seeds_and_the_cpu_overlay_asks_for_no_gpu() -> None:
    gpu_env = config_values(render("qwen3-8b"))
    assert (gpu_env["TARGET_MODEL"], gpu_env["DRAFT_MODEL"]) == ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B")
    assert gpu_env["NUM_SPECULATIVE_TOKENS"] == "5"
    cpu = render("cpu-demo")
    assert config_values(cpu)["TARGET_MODEL"] == "specserve/demo-target"
    assert "nvidia.com/gpu" not in json.dumps(cpu)


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_the_images_install_the_package_and_run_as_a_user_with_a_health_check(name: str) -> None:
    with open(DEPLOY / name, "rb") as f:
        parser = DockerfileParser(fileobj=f)
        structure = parser.structure
    instructions = [(i["instruction"], i["value"]) for i in structure]
    commands = dict(instructions)
    assert any(k == "RUN" and "pip install" in v and "/src" in v for k, v in instructions)
    users = [v for k, v in instructions if k == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert "HEALTHCHECK" in commands and "/health" in commands["HEALTHCHECK"]
    assert json.loads(commands["ENTRYPOINT"]) == ["specserve"]


def test_what_the_images_copy_installs_a_specserve_that_runs_the_bundled_pair(
    tmp_path: Path,
) -> None:
    """The images' COPY lines hold every module and the bundled checkpoints:
    installed from only those files (no Docker here), specserve generates."""
    copies = []
    for name in ("Dockerfile", "Dockerfile.cpu"):
        with open(DEPLOY / name, "rb") as f:
            structure = DockerfileParser(fileobj=f).structure
        copies.append([i["value"].split() for i in structure if i["instruction"] == "COPY"])
    assert copies[0] == copies[1], "both images must copy the same files"
    src = tmp_path / "src"
    for copy in copies[1]:
        *sources, dest = copy
        assert dest.startswith("/src"), copy
        target = src / dest.removeprefix("/src").strip("/")
        for source in sources:
            path = DEPLOY.parent / source
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target)
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, src],
        check=True,
    )
    # -S: no site-packages .pth files, so the editable install of this checkout
    # cannot fill in what the copy lacks; the dependencies come from the venv.
    deps = [p for p in sys.path if p.endswith("site-packages")]
    out = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "specserve",
            "generate",
            "def add(a, b):",
            "--max-tokens",
            "8",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *deps])},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip()


def test_the_rendered_cpu_deployment_runs_on_one_machine_and_serves_the_seeds_client() -> None:
    from tests.test_openai_server import run_the_seeds_client_code

    process = subprocess.Popen(
        [
            sys.executable,
            str(DEPLOY / "run_local.py"),
            str(DEPLOY / "kubernetes/overlays/cpu-demo"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(DEPLOY.parent)},
    )
    try:
        assert process.stdout is not None
        seen = []
        for line in process.stdout:
            seen.append(line)
            if match := re.search(r"local deployment ready: gateway on (\S+)", line):
                break
        else:
            raise AssertionError("".join(seen))
        threading.Thread(target=process.stdout.read, daemon=True).start()  # keep it draining
        run_the_seeds_client_code(f"http://{match.group(1)}", stream=False)
        run_the_seeds_client_code(f"http://{match.group(1)}", stream=True)
    finally:
        process.terminate()
        process.wait(timeout=120)
