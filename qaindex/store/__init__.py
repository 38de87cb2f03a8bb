"""On-disk files: atomic writes, the two directory formats, records, locks, ownership.

The files of an index or model directory, one level below what uses them: :mod:`.atomic_files`
(checksummed atomic files), :mod:`.index_format` (the index directory's layout and manifest,
validated where it is read, and a snapshot's vectors and records opened) and
:mod:`.index_checks` (what the checksums cannot vouch for), :mod:`.field_ranges` (the valid
range of every stored value), :mod:`.model_format` (model directories), :mod:`.records`
(answers as JSON lines), :mod:`.locking` and :mod:`.concurrency` (one writer, many readers),
:mod:`.ownership` (what may be deleted) and :mod:`.diskspace` (disk-full errors). Assembling a
snapshot from the runtime's pieces (model, indexes, reranker) and back is
:mod:`qaindex.snapshot`'s, beside the Ranker.
"""
