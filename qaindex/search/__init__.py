"""What a query does after the encoder, and the runtime objects every query reads.

:mod:`.state` (the read-only index state the Ranker hands down), :mod:`.plan` (the arguments
checked once, and the stages they choose), :mod:`.pipeline` (coarse rows, exact scores,
filters, fusion, reranking), :mod:`.budget` (results bounded before anything is allocated),
:mod:`.filters` (``where``: which answers match, and the filtered search; :mod:`.where` its
operators), :mod:`.fusion` (dense and lexical rankings combined), :mod:`.scoring` (hybrid
hits' score), :mod:`.keys` (stored questions searched beside their answers), :mod:`.hits`,
:mod:`.calibration` (raw scores as probabilities) and :mod:`.recall` (the coarse stage and the
pipeline against exact search).
"""
