"""The token tables a model reads: MiniLM's token embeddings, GloVe/word2vec files, tables
distilled from MiniLM (and its sentence teacher), and the embedding spec that picks one."""
