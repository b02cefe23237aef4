"""The wire contract (package ``specserve.v1``): the .proto files, the stubs
grpcio-tools makes from them, and the one way every specserve gRPC server is
built (with the standard health and reflection services)."""
