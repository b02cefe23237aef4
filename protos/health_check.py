"""Check a specserve gRPC service's health the way Kubernetes' gRPC probes do,
over TLS when the service serves it (Kubernetes' own probes speak plain text):

    python -m protos.health_check 127.0.0.1:50052 --tls-ca-file ca.pem ...

Exits 0 when the service reports SERVING, 1 otherwise (2 for bad flags).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.tls import TlsConfig


def serving(address: str, tls: TlsConfig, service: str = "", timeout_s: float = 4.0) -> bool:
    with tls.channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(request, timeout=timeout_s)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", help="host:port of the service")
    parser.add_argument("--service", default="", help="a service name; default: the server")
    parser.add_argument("--timeout-s", type=float, default=4.0)
    for f in dataclasses.fields(TlsConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in (bool, "bool"):
            parser.add_argument(flag, dest=f.name, action="store_true", help=f.metadata["help"])
        else:
            parser.add_argument(flag, dest=f.name, help=f.metadata["help"])
    args = parser.parse_args()
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(TlsConfig)}
    tls = TlsConfig(**{**fields, "tls_require_client_cert": False})
    sys.exit(0 if serving(args.address, tls, args.service, args.timeout_s) else 1)


if __name__ == "__main__":
    main()
