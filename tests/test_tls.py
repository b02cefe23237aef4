"""Transport security: workers and router over mutual TLS, the Router API
behind a bearer token, and the gateway dialing its router over TLS with the
token, its own API key guarding /metrics when asked."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import router_pb2 as rpb
from protos.router_pb2_grpc import RouterStub
from specserve.launch import service

ARGS = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256")
TOKEN = "router-s3cret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, and one certificate for 127.0.0.1 that every process serves and dials with."""
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    files = {"ca": folder / "ca.pem", "cert": folder / "cert.pem", "key": folder / "key.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
    return files


def tls_flags(pki: dict[str, Path]) -> tuple[str, ...]:
    return (
        *("--tls-cert-file", str(pki["cert"]), "--tls-key-file", str(pki["key"])),
        *("--tls-ca-file", str(pki["ca"]), "--tls-require-client-cert"),
    )


@pytest.fixture(scope="module")
def router(pki: dict[str, Path]) -> Iterator[str]:
    tls = tls_flags(pki)
    with (
        service("target-worker", "--model", "specserve/demo-target", *ARGS, *tls) as (t, _),
        service("draft-worker", "--model", "specserve/demo-draft", *ARGS, *tls) as (d, _),
        service(
            "router", "--target-workers", t, "--draft-workers", d, "--router-token", TOKEN, *tls
        ) as (address, _),
    ):
        yield address


def secure(address: str, pki: dict[str, Path], client_cert: bool = True) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki["ca"].read_bytes(),
        private_key=pki["key"].read_bytes() if client_cert else None,
        certificate_chain=pki["cert"].read_bytes() if client_cert else None,
    )
    return grpc.secure_channel(address, credentials)


def generate(channel: grpc.Channel, token: str | None) -> list[rpb.GenerateResponse]:
    request = rpb.GenerateRequest(text="def f(x):", max_tokens=8)
    metadata = () if token is None else (("authorization", f"Bearer {token}"),)
    return list(RouterStub(channel).Generate(request, timeout=60, metadata=metadata))


def test_the_router_serves_over_mutual_tls_with_the_token(router: str, pki: dict) -> None:
    with secure(router, pki) as channel:
        responses = generate(channel, TOKEN)
        assert sum(len(r.token_ids) for r in responses) == 8
        assert responses[-1].speculation.num_draft_tokens > 0  # the draft worker, over TLS too


@pytest.mark.parametrize("token", [None, "wrong"])
def test_a_call_without_the_token_is_unauthenticated(router: str, pki: dict, token: str) -> None:
    with secure(router, pki) as channel:
        with pytest.raises(grpc.RpcError) as info:
            generate(channel, token)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        check = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        assert check.status == health_pb2.HealthCheckResponse.SERVING  # probes stay open


def test_plain_text_and_clients_without_a_certificate_are_refused(router: str, pki: dict) -> None:
    for channel in (grpc.insecure_channel(router), secure(router, pki, client_cert=False)):
        with channel, pytest.raises(grpc.RpcError) as info:
            generate(channel, TOKEN)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def get(url: str, key: str | None = None) -> tuple[int, bytes]:
    headers = {} if key is None else {"Authorization": key}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_a_gateway_reaches_its_router_over_tls_and_guards_metrics(router: str, pki: dict) -> None:
    flags = ("--host", "127.0.0.1", "--router", router, "--router-token", TOKEN, *tls_flags(pki))
    keys = ("--api-key", "gw-key", "--protect-metrics")
    with service("serve", *flags, *keys) as (address, _):
        base = f"http://{address}"
        assert get(f"{base}/metrics")[0] == 401
        assert get(f"{base}/metrics", "BEARER gw-key")[0] == 200  # the scheme in any case
        request = urllib.request.Request(
            f"{base}/v1/completions",
            data=b'{"prompt": "def f():", "max_tokens": 3}',
            headers={"Content-Type": "application/json", "Authorization": "Bearer gw-key"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert json.loads(reply.read())["choices"][0]["text"]


def test_the_tls_health_check_the_manifests_probe_with(router: str, pki: dict) -> None:
    def check(*flags: str) -> int:
        command = [sys.executable, "-m", "protos.health_check", router, *flags]
        return subprocess.run(command, capture_output=True, timeout=60).returncode

    assert check(*tls_flags(pki)[:-1], "--tls-server-name", "localhost") == 0
    assert check() == 1  # plain text: the router speaks only TLS
