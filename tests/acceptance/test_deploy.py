"""deploy/: the Dockerfile and the Kubernetes manifests run commands that exist and probe
what those commands serve (ADR 0136). Docker is not run here: the files are parsed.

- Every container's arguments (after the image's ``venturi`` entrypoint) parse with
  the CLI's own parser: the command and each option exist, each value is valid.
- Worker and beat probe ``/healthz`` (liveness) and ``/readyz`` (readiness) on the
  container port their ``--health-port`` names; the dashboard probes its ``--port``.
- A worker pod's ``terminationGracePeriodSeconds`` exceeds its ``--grace``.
- The Dockerfile builds a wheel in a first stage, installs that wheel from
  ``python:3.12-slim`` and runs as a numeric non-root user, the manifests' user.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from venturi.cli import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))


def documents() -> list[dict[str, Any]]:
    return [d for path in MANIFESTS for d in yaml.safe_load_all(path.read_text()) if d]


def pod_specs() -> dict[str, dict[str, Any]]:
    """Each Deployment's and Job's pod spec, by the object's name."""
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in documents()
        if d["kind"] in ("Deployment", "Job")
    }


def entrypoint() -> list[str]:
    [line] = re.findall(r"^ENTRYPOINT (.+)$", (DEPLOY / "Dockerfile").read_text(), re.MULTILINE)
    command: list[str] = yaml.safe_load(line)  # the exec form is a JSON array
    return command


def parsed(container: dict[str, Any]) -> Any:
    command = [*container.get("command", entrypoint()), *container["args"]]
    assert command[0] == "venturi", command
    return build_parser().parse_args(command[1:])


def port_number(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    [number] = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(number)


def test_the_manifests_hold_the_migrate_job_and_the_three_deployments() -> None:
    assert set(pod_specs()) == {
        "venturi-migrate", "venturi-worker", "venturi-beat", "venturi-dashboard",
    }  # fmt: skip


@pytest.mark.parametrize("name", ["venturi-migrate", "venturi-worker", "venturi-beat",
                                  "venturi-dashboard"])  # fmt: skip
def test_every_container_runs_a_command_of_the_cli_with_valid_options(name: str) -> None:
    [container] = pod_specs()[name]["containers"]
    args = parsed(container)
    assert args.command == name.removeprefix("venturi-")
    assert pod_specs()[name]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001}


@pytest.mark.parametrize("name", ["venturi-worker", "venturi-beat"])
def test_worker_and_beat_probe_the_health_checks_on_their_health_port(name: str) -> None:
    [container] = pod_specs()[name]["containers"]
    args = parsed(container)
    assert args.health_port is not None
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        assert port_number(container, get["port"]) == args.health_port


def test_the_dashboard_probes_its_own_port() -> None:
    [container] = pod_specs()["venturi-dashboard"]["containers"]
    args = parsed(container)
    for probe in ("livenessProbe", "readinessProbe"):
        assert port_number(container, container[probe]["httpGet"]["port"]) == args.port


def test_a_worker_pod_outlives_its_grace_with_a_margin() -> None:
    spec = pod_specs()["venturi-worker"]
    [container] = spec["containers"]
    assert spec["terminationGracePeriodSeconds"] >= parsed(container).grace + 10


def test_the_dockerfile_installs_the_wheel_built_in_its_first_stage_as_a_non_root_user() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)(?: AS (\S+))?$", text, re.MULTILINE)
    assert stages == [("python:3.12-slim", "wheel"), ("python:3.12-slim", "")]
    assert "python -m build --wheel" in text
    assert "COPY --from=wheel" in text
    assert re.search(r"pip install .*venturi-\*\.whl", text)
    [user] = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert user.split(":")[0] == "10001"
    assert entrypoint() == ["venturi"]
