"""On-disk state: atomic files, index snapshots, records, locks, and the two directory formats.

Everything that reads or writes an index or model directory lives here: :mod:`.storage`
(checksummed atomic files), :mod:`.index_format` and :mod:`.index_checks` (the index manifest
and snapshots: written where they are validated), :mod:`.field_ranges` (the valid range of
every stored value), :mod:`.model_format` (model directories), :mod:`.records` (answers as
JSON lines), :mod:`.locking` and :mod:`.concurrency` (one writer, many readers),
:mod:`.ownership` (what may be deleted) and :mod:`.diskspace` (disk-full errors).
"""
