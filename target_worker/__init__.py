"""TargetWorker: prefills prompts, verifies drafts in one forward pass, and
rejection-samples them with Triton kernels."""
