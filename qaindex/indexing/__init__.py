"""Building an index from a corpus: streaming, distributed on Ray, and tuning the coarse stage.

:mod:`.streaming` (a JSONL corpus encoded chunk by chunk in bounded memory),
:mod:`.distributed` (the same on a Ray cluster) and :mod:`.tuning` (the coarse stage's search
breadth fitted to a recall target).
"""
