"""The flags vLLM launch scripts pass to ``serve``, on a real server: the
model as a flag, the engine's limits in either spelling, HTTPS, a root path,
CORS, a chat template, the access log and request logging; and the ones it
does not do, refused before anything loads."""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from specserve.cli import main
from specserve.launch import service

TEMPLATE = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
ORIGIN = "http://app.example"
KEY = "sesame"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def https_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, ssl.SSLContext, subprocess.Popen[str]]]:
    folder = tmp_path_factory.mktemp("serve-flags")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(folder / "key.pem")
    cert.cert_chain_pems[0].write_to_path(folder / "cert.pem")
    (folder / "template.jinja").write_text(TEMPLATE)
    flags = (
        "--model", "specserve/demo-target", "--dtype", "float32", "--host", "127.0.0.1",
        "--max_num_seqs", "8", "--max-num-batched-tokens", "2048", "--block-size", "16",
        "--ssl-keyfile", str(folder / "key.pem"), "--ssl-certfile", str(folder / "cert.pem"),
        "--root-path", "/llm", "--allowed-origins", json.dumps([ORIGIN]),
        "--chat-template", str(folder / "template.jinja"), "--trust-remote-code",
        "--api-key", KEY, "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    )  # fmt: skip
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with service("serve", *flags) as (address, process):
        yield f"https://{address}", context, process


def get(url: str, context: ssl.SSLContext, **headers: str) -> urllib.request.addinfourl:
    request = urllib.request.Request(url, headers=AUTH | headers)
    return urllib.request.urlopen(request, timeout=60, context=context)  # type: ignore[no-any-return]


def post(url: str, context: ssl.SSLContext, body: dict) -> dict:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"content-type": "application/json", **AUTH})
    with urllib.request.urlopen(request, timeout=60, context=context) as reply:
        return json.loads(reply.read())  # type: ignore[no-any-return]


def test_the_model_flag_and_the_engine_limits_serve_over_https(https_server) -> None:  # type: ignore[no-untyped-def]
    base, context, _ = https_server
    with get(f"{base}/v1/models", context) as reply:
        assert json.loads(reply.read())["data"][0]["id"] == "specserve/demo-target"
    done = post(f"{base}/v1/completions", context, {"prompt": "def f(x):", "max_tokens": 4})
    assert done["usage"]["completion_tokens"] == 4


def test_the_api_key_guards_the_routes_under_the_root_path(https_server) -> None:  # type: ignore[no-untyped-def]
    # The proxy strips the root path; the app sees /llm/v1/models as its URL.
    base, context, _ = https_server
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/v1/models", timeout=10, context=context)
    assert refused.value.code == 401


def test_cors_answers_the_allowed_origin_only(https_server) -> None:  # type: ignore[no-untyped-def]
    base, context, _ = https_server
    with get(f"{base}/v1/models", context, Origin=ORIGIN) as reply:
        assert reply.headers["access-control-allow-origin"] == ORIGIN
    with get(f"{base}/v1/models", context, Origin="http://other.example") as reply:
        assert "access-control-allow-origin" not in reply.headers


def test_the_chat_template_flag_replaces_the_models(https_server) -> None:  # type: ignore[no-untyped-def]
    base, context, _ = https_server
    messages = [{"role": "user", "content": "hi"}]
    ids = post(f"{base}/tokenize", context, {"messages": messages})["tokens"]
    assert post(f"{base}/detokenize", context, {"tokens": ids})["prompt"] == "<<hi>>"


def test_auto_tool_choice_is_served_with_its_parser(https_server) -> None:  # type: ignore[no-untyped-def]
    base, context, _ = https_server
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [tool], "max_tokens": 4}
    reply = post(f"{base}/v1/chat/completions", context, body)  # auto: the default with tools
    (choice,) = reply["choices"]
    assert isinstance(choice["message"]["content"], str)  # no <tool_call> written: all text
    assert choice["finish_reason"] in ("stop", "length")


def test_the_first_log_line_says_what_is_served_and_where(https_server) -> None:  # type: ignore[no-untyped-def]
    base, _, process = https_server
    (banner,) = [line for line in process.output_tail if "OpenAI API at" in line]
    assert "serving specserve/demo-target (no speculation), in this process" in banner
    assert "target KV cache:" in banner and f"{base}/v1" in banner


def test_requests_are_logged_with_the_access_log(https_server) -> None:  # type: ignore[no-untyped-def]
    base, context, process = https_server
    post(f"{base}/v1/completions", context, {"prompt": "x", "max_tokens": 1})
    time.sleep(0.5)  # the output is read on another thread
    tail = "".join(process.output_tail)
    assert "POST /llm/v1/completions" in tail  # uvicorn's access log, under the root path
    assert "prompt tokens, 1 choices, max_tokens 1" in tail  # the request log


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--enable-prefix-caching"], "--enable-prefix-caching is not supported yet"),
        (["--generation-config", "auto"], "--generation-config 'auto' is not supported yet"),
        (["specserve/demo-target", "--model", "other"], "the model is given twice"),
        (["--allowed-origins", "*"], "--allowed-origins must be a JSON list"),
        (["--ssl-keyfile", "key.pem"], "--ssl-keyfile and --ssl-certfile go together"),
        (["--enable-auto-tool-choice"], "--enable-auto-tool-choice needs --tool-call-parser"),
        (["--tool-call-parser", "xml"], "--tool-call-parser 'xml' is not one of hermes"),
    ],
    ids=[
        "prefix-caching",
        "generation-config",
        "model-twice",
        "origins",
        "half-tls",
        "auto-tools-alone",
        "unknown-parser",
    ],
)
def test_what_serve_does_not_do_is_refused_before_loading(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["serve", *flags]) == 2
    assert message in capsys.readouterr().err
