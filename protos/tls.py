"""How a specserve gRPC server or client is secured: TLS, or mutual TLS.

One identity per process: ``--tls-cert-file`` and ``--tls-key-file`` are what
it serves with and, as a client, what it presents when the peer asks for a
client certificate; ``--tls-ca-file`` is the authority it trusts (to verify
the servers it dials, and with ``--tls-require-client-cert`` the clients that
dial it); ``--tls-server-name`` is the name the peers' certificates carry
when a deployment gives every service one certificate. Without a certificate
a server listens in plain text, and without a CA file a client dials in
plain text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc


@dataclass(frozen=True)
class TlsConfig:
    tls_cert_file: str | None = field(
        default=None, metadata={"help": "this service's certificate (PEM): serve over TLS"}
    )
    tls_key_file: str | None = field(
        default=None, metadata={"help": "the private key of --tls-cert-file (PEM)"}
    )
    tls_ca_file: str | None = field(
        default=None,
        metadata={"help": "the CA (PEM) that signs the services this one dials: dial over TLS"},
    )
    tls_server_name: str | None = field(
        default=None,
        metadata={
            "help": "the name the dialed services' certificates carry, when it is not the "
            "address dialed (pods found by DNS are dialed by IP)"
        },
    )
    tls_require_client_cert: bool = field(
        default=False,
        metadata={"help": "mutual TLS: clients must present a certificate --tls-ca-file signed"},
    )

    def __post_init__(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("--tls-cert-file and --tls-key-file go together")
        if self.tls_require_client_cert and (self.tls_ca_file is None or not self.serves_tls):
            raise ValueError(
                "--tls-require-client-cert needs --tls-cert-file, --tls-key-file and the "
                "--tls-ca-file that signs the clients' certificates"
            )
        for name in ("tls_cert_file", "tls_key_file", "tls_ca_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"--{name.replace('_', '-')} {path}: no such file")

    @property
    def serves_tls(self) -> bool:
        return self.tls_cert_file is not None

    @property
    def dials_tls(self) -> bool:
        return self.tls_ca_file is not None

    def flags(self) -> list[str]:
        """The command-line flags that give a child process this configuration."""
        out: list[str] = []
        for name in ("tls_cert_file", "tls_key_file", "tls_ca_file", "tls_server_name"):
            if getattr(self, name) is not None:
                out += [f"--{name.replace('_', '-')}", str(getattr(self, name))]
        return out + (["--tls-require-client-cert"] if self.tls_require_client_cert else [])

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """None: serve in plain text."""
        if not self.serves_tls:
            return None
        pair = (_read(self.tls_key_file), _read(self.tls_cert_file))
        return grpc.ssl_server_credentials(
            [pair],
            root_certificates=_read(self.tls_ca_file) if self.tls_require_client_cert else None,
            require_client_auth=self.tls_require_client_cert,
        )

    def channel(self, address: str, options: Any = None, aio: bool = False) -> Any:
        """A channel to ``address``: TLS when a CA is given, else plain text."""
        make = grpc.aio if aio else grpc
        if not self.dials_tls:
            return make.insecure_channel(address, options=options)
        if self.tls_server_name is not None:
            options = [*(options or []), ("grpc.ssl_target_name_override", self.tls_server_name)]
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(self.tls_ca_file),
            private_key=_read(self.tls_key_file) if self.serves_tls else None,
            certificate_chain=_read(self.tls_cert_file) if self.serves_tls else None,
        )
        return make.secure_channel(address, credentials, options=options)


def _read(path: str | None) -> bytes:
    assert path is not None
    return Path(path).read_bytes()


PLAIN = TlsConfig()
