"""Building blocks shared by every model file: parallel linear and embedding
layers, normalisation, rotary embeddings, activations and paged attention."""
