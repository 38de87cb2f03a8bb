"""The token tables a model reads: MiniLM's token embeddings, GloVe/word2vec files, tables
distilled from MiniLM (per token, and fitted to its sentence vectors for the built-in model),
and the embedding spec that picks one."""
