"""The rendered deployment gives every specserve pod time to drain: its
termination grace outlasts the grace its command drains for."""

from __future__ import annotations

from typing import Any

import pytest

from protos.server import DEFAULT_GRACE_S
from tests.test_deploy import OVERLAYS, pod_templates, render


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_outlasts_its_services_drain(overlay: str) -> None:
    templates: list[dict[str, Any]] = [t for r in render(overlay) for t in pod_templates(r)]
    assert templates
    for template in templates:
        spec = template["spec"]
        for container in spec["containers"]:
            args = container.get("args", [])
            grace = (
                float(args[args.index("--grace-s") + 1]) if "--grace-s" in args else DEFAULT_GRACE_S
            )
            assert spec.get("terminationGracePeriodSeconds", 30) > grace, container["name"]
