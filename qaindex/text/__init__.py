"""Text in, tokens out: the tokenizer shared with training, sentence chunking, and BM25.

:mod:`.tokenizer` (deterministic word pieces), :mod:`.chunking` (sentences for hierarchical
encoders) and :mod:`.lexical` (the BM25 index of hybrid search).
"""
