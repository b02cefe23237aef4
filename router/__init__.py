"""The engine: requests and their sequences, the round scheduler, the drafter
and verifier over the worker pools, worker clients (the interface, and its
gRPC transport), draft-pool discovery, the engine loop and the Router gRPC
service. It reaches workers only through ``router.clients``."""
