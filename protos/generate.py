"""Regenerate the Python stubs from the .proto files.

    python -m protos.generate

Run it after editing a .proto file and commit the result; a test fails while
the committed stubs differ from what grpcio-tools makes of the .proto files.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent


def generate(out_dir: Path) -> list[Path]:
    """Write the stubs for every .proto file under ``out_dir``/protos; return them."""
    protos = sorted(p.relative_to(ROOT) for p in PROTO_DIR.glob("*.proto"))
    (out_dir / "protos").mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *map(str, protos),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(map(str, protos))}")
    return sorted((out_dir / "protos").glob("*_pb2*.py*"))


if __name__ == "__main__":
    for path in generate(ROOT):
        print(path.relative_to(ROOT), file=sys.stderr)
