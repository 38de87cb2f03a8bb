"""qaindex: embedded question→answer retrieval with hyperbolic (Poincaré) dual encoders.

The runtime needs numpy, onnxruntime, faiss and click; it never imports torch.

Example
-------
>>> import qaindex
>>> ranker = qaindex.Ranker.build("examples/faq.jsonl")
>>> hits = ranker.search("How do I reset my password?", k=3)
>>> hits[0].id, len(hits)
('account-reset-password', 3)
"""

from __future__ import annotations

import logging as _logging

from .corpus import Record, read_corpus
from .errors import (
    CorpusError,
    DeviceError,
    DiskFullError,
    IndexChangedError,
    IndexFormatError,
    IndexLockedError,
    MissingDependencyError,
    ModelFormatError,
    QAIndexError,
    QueryError,
)
from .model import Model
from .ranker import Hit, Ranker
from .reranker import Reranker
from .version import __version__

__all__ = [
    "CorpusError",
    "DeviceError",
    "DiskFullError",
    "Hit",
    "IndexChangedError",
    "IndexFormatError",
    "IndexLockedError",
    "MissingDependencyError",
    "Model",
    "ModelFormatError",
    "QAIndexError",
    "QueryError",
    "Ranker",
    "Record",
    "Reranker",
    "ShardedRanker",
    "__version__",
    "read_corpus",
]


def __getattr__(name: str) -> object:
    # a shard set's class is imported on first use: a plain index never loads the sharding code
    if name == "ShardedRanker":
        from .sharded import ShardedRanker

        return ShardedRanker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Library logging: silent unless the application configures the "qaindex" logger.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())
