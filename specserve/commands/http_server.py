"""The HTTP side of ``specserve serve``: uvicorn over the gateway's app, and
the flags vLLM's server takes for it (TLS, a root path behind a proxy, CORS,
the access log, log levels, a chat template, request logging)."""

from __future__ import annotations

import json
import logging
import math
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protos.server import catch_termination

logger = logging.getLogger(__name__)

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def _json_list(name: str, text: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--{name.replace('_', '-')} must be a JSON list, got {text!r}") from e
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"--{name.replace('_', '-')} must be a JSON list of strings")
    return value


@dataclass(frozen=True)
class HttpConfig:
    uvicorn_log_level: str = field(
        default="info", metadata={"help": "uvicorn's log level", "choices": LOG_LEVELS}
    )
    disable_uvicorn_access_log: bool = field(
        default=False, metadata={"help": "do not log each HTTP request (the access log)"}
    )
    disable_log_requests: bool = field(
        default=False, metadata={"help": "do not log each request's id, size and sampling"}
    )
    log_level: str = field(
        default="info",
        metadata={"help": "specserve's log level", "choices": LOG_LEVELS[:-1]},
    )
    ssl_keyfile: str | None = field(default=None, metadata={"help": "serve HTTPS: the key"})
    ssl_certfile: str | None = field(
        default=None, metadata={"help": "serve HTTPS: the certificate (with --ssl-keyfile)"}
    )
    root_path: str | None = field(
        default=None, metadata={"help": "the path prefix a proxy serves this server under"}
    )
    allowed_origins: str = field(
        default='["*"]', metadata={"help": "CORS: origins allowed, a JSON list"}
    )
    allowed_methods: str = field(
        default='["*"]', metadata={"help": "CORS: methods allowed, a JSON list"}
    )
    allowed_headers: str = field(
        default='["*"]', metadata={"help": "CORS: headers allowed, a JSON list"}
    )
    allow_credentials: bool = field(default=False, metadata={"help": "CORS: allow credentials"})
    chat_template: str | None = field(
        default=None,
        metadata={"help": "a chat template (a file, or the template itself) for the model's own"},
    )
    enable_auto_tool_choice: bool = field(
        default=False, metadata={"help": 'serve tool_choice "auto" (needs --tool-call-parser)'}
    )
    tool_call_parser: str | None = field(
        default=None, metadata={"help": "how the model writes tool calls: hermes"}
    )

    def __post_init__(self) -> None:
        from gateway.tools import TOOL_CALL_PARSERS  # the gateway, only when serving

        if self.tool_call_parser not in (None, *TOOL_CALL_PARSERS):
            raise ValueError(
                f"--tool-call-parser {self.tool_call_parser!r} is not one of "
                f"{', '.join(TOOL_CALL_PARSERS)}"
            )
        if self.enable_auto_tool_choice and self.tool_call_parser is None:
            raise ValueError("--enable-auto-tool-choice needs --tool-call-parser (hermes)")
        for name in ("allowed_origins", "allowed_methods", "allowed_headers"):
            _json_list(name, getattr(self, name))
        if (self.ssl_keyfile is None) != (self.ssl_certfile is None):
            raise ValueError("--ssl-keyfile and --ssl-certfile go together: pass both")
        for path in (self.ssl_keyfile, self.ssl_certfile):
            if path is not None and not Path(path).is_file():
                raise ValueError(f"no such file: {path}")

    def cors(self) -> dict[str, Any]:
        """The CORS middleware's options."""
        return {
            "allow_origins": _json_list("allowed_origins", self.allowed_origins),
            "allow_methods": _json_list("allowed_methods", self.allowed_methods),
            "allow_headers": _json_list("allowed_headers", self.allowed_headers),
            "allow_credentials": self.allow_credentials,
        }

    @property
    def auto_tool_parser(self) -> str | None:
        """The parser "auto" tool choice reads calls with (None: refused)."""
        return self.tool_call_parser if self.enable_auto_tool_choice else None

    def template(self) -> str | None:
        """The chat template's text: the file's, or the flag's own."""
        if self.chat_template is None:
            return None
        path = Path(self.chat_template)
        return path.read_text() if path.is_file() else self.chat_template

    def apply_log_level(self) -> None:
        logging.getLogger().setLevel(self.log_level.upper())


def run_http(
    app: Any, http: HttpConfig, host: str, port: int, grace_s: float, banner: str = ""
) -> None:
    """Serve ``app`` on host:port until SIGTERM; open connections get
    ``grace_s`` to finish (the gateway cuts streams just before). ``banner``
    (what is served) is logged with the address."""
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, telling the gateway when it is told to stop."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.gateway.drain.start(grace_s)
            super().handle_exit(sig, frame)

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    scheme = "https" if http.ssl_certfile else "http"
    address = f"{host}:{sock.getsockname()[1]}"
    logger.info("%s; OpenAI API at %s://%s/v1", banner or "serving", scheme, address)
    print(f"gateway ready on {address} ({scheme})", flush=True)
    # uvicorn re-raises the signal that stopped it once it has drained; caught
    # here, it ends the process normally (exit code 0) instead of killing it.
    catch_termination()
    config = uvicorn.Config(
        app,
        log_level=http.uvicorn_log_level,
        access_log=not http.disable_uvicorn_access_log,
        timeout_graceful_shutdown=math.ceil(grace_s),
        ssl_keyfile=http.ssl_keyfile,
        ssl_certfile=http.ssl_certfile,
        root_path=http.root_path or "",
    )
    Server(config).run(sockets=[sock])
