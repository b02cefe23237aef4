"""The OpenAI-compatible HTTP gateway, over a backend: the engine in this
process, or a Router service over gRPC."""
