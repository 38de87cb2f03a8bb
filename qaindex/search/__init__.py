"""The stages of a query after the encoder: memory budget, filters, fusion with BM25.

:mod:`.budget` (results bounded before anything is allocated), :mod:`.filters` (``where``:
which answers match, and the filtered search; :mod:`.where` its operators), :mod:`.fusion`
(dense and lexical rankings combined) and :mod:`.scoring` (hybrid hits' score).
"""
