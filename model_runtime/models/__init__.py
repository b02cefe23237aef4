"""Model files, one per architecture family, with Hugging Face parameter names."""
