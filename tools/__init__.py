"""Data preparation and the tools that build the shipped model, run from the repository root as
``python -m tools.NAME``.

:mod:`tools.corpora` (the evaluation corpora the quality benchmarks read), :mod:`tools.glove`
(GloVe vectors as a text file, for the paper reproductions), :mod:`tools.training_corpus`
(the general training corpus, from :mod:`tools.doc_sources` and :mod:`tools.doc_repos`),
:mod:`tools.teacher_embeddings` (the teacher's vectors of it), :mod:`tools.build_default_model`
(trains, evaluates and installs the default model, writes its card),
:mod:`tools.fit_default_fusion` (fits its fusion rule and hybrid score into its manifest) and
:mod:`tools.static_capacity` (how far a static table can go on the evaluation corpora). They
import the benchmarks' evaluation (:mod:`benchmarks.quality.pooled_eval`,
:mod:`benchmarks.quality.corpus_format`) as a package, never through ``sys.path``; the
benchmarks never import them.
"""
