"""The wire (package ``specserve.v1``): the .proto files, the stubs
grpcio-tools makes from them, the typed in-process messages and the
conversion between the two, and the one way every specserve gRPC server is
built (with the standard health and reflection services, ``protos.server``).
Nothing here runs a model."""
