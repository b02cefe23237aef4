"""Stream a completion from a running specserve router over gRPC.

specserve target-worker --model specserve/demo-target --port 50052 &
specserve draft-worker --model specserve/demo-draft --port 50053 &
specserve router --target-workers localhost:50052 --draft-workers localhost:50053 --port 50051 &
python examples/grpc_client.py localhost:50051 "def fibonacci(n):"
"""

import sys

import grpc

from protos import common_pb2, router_pb2, router_pb2_grpc

address, prompt = sys.argv[1], sys.argv[2]
with grpc.insecure_channel(address) as channel:
    router = router_pb2_grpc.RouterStub(channel)
    request = router_pb2.GenerateRequest(
        text=prompt,
        max_tokens=64,
        sampling=common_pb2.SamplingParams(temperature=0.8, top_p=0.95),
    )
    for response in router.Generate(request, timeout=60):
        print(response.text, end="", flush=True)
    print()
    stats = response.speculation
    print(
        f"accepted {stats.num_accepted_tokens} of {stats.num_draft_tokens} drafts", file=sys.stderr
    )
