"""What the draft and target workers share: the in-process worker over a
runner, the worker whose ranks run on an executor, the gRPC servicer with its
one batch loop, and serving a worker until SIGTERM."""
