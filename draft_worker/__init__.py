"""DraftWorker: holds a draft model and proposes k tokens per sequence per round."""
