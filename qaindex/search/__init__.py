"""The stages of a query after the encoder: memory budget, filters, fusion with BM25.

:mod:`.budget` (results bounded before anything is allocated), :mod:`.filters` (``where``)
and :mod:`.fusion` (dense and lexical rankings combined), :mod:`.scoring` (hybrid hits' score).
"""
