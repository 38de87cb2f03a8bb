"""Measuring models on labelled data: metrics, evaluation, recall, calibration, inspection.

:mod:`.datasets` (labelled question/candidate files), :mod:`.metrics` (MAP, MRR, P@1, exact
under ties), :mod:`.evaluate` (a model or an index on labelled data), :mod:`.recall` (the coarse
stage against exact search), :mod:`.calibration` (scores as probabilities) and :mod:`.inspect`
(where a Poincaré model puts questions and answers).
"""
