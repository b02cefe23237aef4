"""Run a rendered deployment on this machine: the processes the manifests
describe (draft worker, target worker, router, gateway), each with its
container's arguments, on loopback.

    python deploy/run_local.py deploy/kubernetes/overlays/cpu-demo

Only what must change off a cluster changes: every service listens on
127.0.0.1 at a free port, the Service names its clients dial become those
loopback addresses, and when the target worker joins a Ray cluster
(`--ray-address`), a one-node Ray cluster is started here first, as the
RayCluster's head would be. Stops everything on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from protos.server import catch_termination, wait_for
from specserve.launch import ServiceProcess, free_port

DNS = "dns:///"

# Which command each Service fronts, and the order they start in.
ORDER = ["draft-worker", "target-worker", "router", "serve"]


def render(overlay: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise SystemExit("run_local.py needs kubectl (its built-in kustomize renders the overlay)")
    out = subprocess.run(
        [kubectl, "kustomize", str(overlay)], capture_output=True, text=True, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def commands(manifests: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each specserve container's arguments, $(VAR)s expanded from the ConfigMap."""
    (config,) = [r for r in manifests if r["kind"] == "ConfigMap"]
    env = config["data"]
    found = {}
    for resource in manifests:
        spec = resource.get("spec", {})
        groups = (
            [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
            if (resource["kind"] == "RayCluster")
            else ([spec] if "template" in spec else [])
        )
        for group in groups:
            for c in group["template"]["spec"]["containers"]:
                if c.get("command") == ["specserve"]:
                    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in c["args"]]
                    found[args[0]] = args
    return found


def services(manifests: list[dict[str, Any]], listening: dict[str, int]) -> dict[str, str]:
    """Service host:port -> the command listening behind it."""
    by_port = {port: command for command, port in listening.items()}
    return {
        f"{r['metadata']['name']}:{p['port']}": by_port[p["targetPort"]]
        for r in manifests
        if r["kind"] == "Service"
        for p in r["spec"]["ports"]
        if p["targetPort"] in by_port
    }


def localise(args: list[str], addresses: dict[str, str], dialled: dict[str, str]) -> list[str]:
    """The same arguments, listening and dialling on loopback: a Service name
    becomes the address its command (started before) listens on; ``--port`` is
    left out (the caller passes one)."""
    out: list[str] = []
    for i, a in enumerate(args):
        previous = args[i - 1] if i else ""
        if a == "--port" or previous == "--port":
            continue
        if previous == "--host":
            a = "127.0.0.1"
        elif previous == "--metrics-port":
            a = str(free_port())
        elif (name := a.removeprefix(DNS)) in dialled:  # dns:///NAME:PORT stays a name
            a = a.replace(name, addresses[dialled[name]])
        out.append(a)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overlay", type=Path, help="a kustomize overlay folder")
    options = parser.parse_args()
    manifests = render(options.overlay)
    found = commands(manifests)
    listening = {c: int(a[a.index("--port") + 1]) for c, a in found.items()}
    dialled = services(manifests, listening)
    received = catch_termination()
    with ExitStack() as stack:
        if "--ray-address" in found["target-worker"]:
            ray = str(Path(sys.executable).parent / "ray")
            size = found["target-worker"][found["target-worker"].index("-tp") + 1]
            head = ["start", "--head", f"--port={free_port()}", f"--num-cpus={size}"]
            head += ["--include-dashboard=false", "--disable-usage-stats"]
            subprocess.run([ray, *head], check=True, capture_output=True)
            stack.callback(subprocess.run, [ray, "stop", "--force"], capture_output=True)
        # Each listens on a port the system picks (port 0) and says which once
        # ready: ports chosen ahead could be taken meanwhile (Ray's processes
        # take many).
        addresses: dict[str, str] = {}
        for command in ORDER:
            args = localise(found[command], addresses, dialled)
            process = ServiceProcess(*args, echo_prefix=command)
            stack.callback(process.stop)
            addresses[command] = process.wait_ready()
        print(f"local deployment ready: gateway on {addresses['serve']}", flush=True)
        wait_for(received)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
