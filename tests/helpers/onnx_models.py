"""Tiny ONNX encoders and scorers built with the ``onnx`` helper API (no torch).

They follow the graph contracts of ``qaindex.model`` so the runtime can be tested on its
own: a bag-of-words encoder (embedding lookup, masked sum, radial projection into the
ball) and exact Poincaré / cosine scorers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qaindex.model import write_model
from qaindex.text.tokenizer import Tokenizer

OPSET = 17
TINY32 = float(np.finfo(np.float32).eps) ** 2


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name=name))


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _one_minus_sqnorm(prefix: str, x: str) -> list[onnx.NodeProto]:
    """Nodes computing ``(1 - |x|)(1 + |x|)`` (clamped) over the last axis, keepdims."""
    p = prefix
    return [
        helper.make_node("Mul", [x, x], [f"{p}_sq"]),
        helper.make_node("ReduceSum", [f"{p}_sq", "axis_last"], [f"{p}_ss"], keepdims=1),
        helper.make_node("Max", [f"{p}_ss", "tiny"], [f"{p}_ssc"]),
        helper.make_node("Sqrt", [f"{p}_ssc"], [f"{p}_n"]),
        helper.make_node("Sub", ["one", f"{p}_n"], [f"{p}_a"]),
        helper.make_node("Add", ["one", f"{p}_n"], [f"{p}_b"]),
        helper.make_node("Mul", [f"{p}_a", f"{p}_b"], [f"{p}_ab"]),
        helper.make_node("Max", [f"{p}_ab", "tiny"], [f"{p}_out"]),
    ]


def encoder_graph(embeddings: np.ndarray, *, max_norm: float | None) -> bytes:
    """input_ids, attention_mask -> masked sum of embedding rows, projected to ``max_norm``."""
    emb = np.asarray(embeddings, dtype=np.float32)
    nodes = [
        _const("emb", emb),
        _const("axis1", np.array([1], dtype=np.int64)),
        _const("axis_last", np.array([-1], dtype=np.int64)),
        _const("axis2", np.array([2], dtype=np.int64)),
        _const("tiny", np.array(TINY32, dtype=np.float32)),
        helper.make_node("Gather", ["emb", "input_ids"], ["tok"]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["tok", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
    ]
    if max_norm is None:
        nodes.append(helper.make_node("Identity", ["summed"], ["vectors"]))
    else:
        nodes += [
            _const("radius", np.array(max_norm, dtype=np.float32)),
            _const("one", np.array(1.0, dtype=np.float32)),
            helper.make_node("Mul", ["summed", "summed"], ["sq"]),
            helper.make_node("ReduceSum", ["sq", "axis_last"], ["ss"], keepdims=1),
            helper.make_node("Max", ["ss", "tiny"], ["ssc"]),
            helper.make_node("Sqrt", ["ssc"], ["norm"]),
            helper.make_node("Div", ["radius", "norm"], ["ratio"]),
            helper.make_node("Min", ["ratio", "one"], ["factor"]),
            helper.make_node("Mul", ["summed", "factor"], ["vectors"]),
        ]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
    ]
    outputs = [helper.make_tensor_value_info("vectors", TensorProto.FLOAT, ["batch", emb.shape[1]])]
    return _model(nodes, inputs, outputs)


def poincare_scorer_graph(w_f: float = 1.0, b_f: float = 0.0) -> bytes:
    """(query, candidates) -> score = -(w_f d + b_f), distance = Poincaré distance."""
    nodes = [
        _const("axis1", np.array([1], dtype=np.int64)),
        _const("axis_last", np.array([-1], dtype=np.int64)),
        _const("tiny", np.array(TINY32, dtype=np.float32)),
        _const("zero", np.array(0.0, dtype=np.float32)),
        _const("one", np.array(1.0, dtype=np.float32)),
        _const("two", np.array(2.0, dtype=np.float32)),
        _const("w", np.array(w_f, dtype=np.float32)),
        _const("b", np.array(b_f, dtype=np.float32)),
        helper.make_node("Unsqueeze", ["query", "axis1"], ["q3"]),
        helper.make_node("Sub", ["q3", "candidates"], ["diff"]),
        helper.make_node("Mul", ["diff", "diff"], ["diff2"]),
        helper.make_node("ReduceSum", ["diff2", "axis_last"], ["dsq"], keepdims=1),
        *_one_minus_sqnorm("q", "q3"),
        *_one_minus_sqnorm("c", "candidates"),
        helper.make_node("Mul", ["q_out", "c_out"], ["den"]),
        helper.make_node("Mul", ["two", "dsq"], ["num"]),
        helper.make_node("Div", ["num", "den"], ["z0"]),
        helper.make_node("Max", ["z0", "zero"], ["z"]),
        helper.make_node("Add", ["z", "two"], ["z2"]),
        helper.make_node("Mul", ["z", "z2"], ["zz"]),
        helper.make_node("Max", ["zz", "tiny"], ["zzc"]),
        helper.make_node("Sqrt", ["zzc"], ["root"]),
        helper.make_node("Add", ["z", "root"], ["arg"]),
        helper.make_node("Add", ["arg", "one"], ["arg1"]),
        helper.make_node("Log", ["arg1"], ["dist3"]),
        helper.make_node("Squeeze", ["dist3", "axis_last"], ["distance"]),
        helper.make_node("Mul", ["distance", "w"], ["wd"]),
        helper.make_node("Add", ["wd", "b"], ["s"]),
        helper.make_node("Neg", ["s"], ["score"]),
    ]
    return _scorer(nodes)


def cosine_scorer_graph() -> bytes:
    """(query, candidates) -> score = cosine, distance = 1 - cosine."""
    nodes = [
        _const("axis1", np.array([1], dtype=np.int64)),
        _const("axis_last", np.array([-1], dtype=np.int64)),
        _const("tiny", np.array(TINY32, dtype=np.float32)),
        _const("one", np.array(1.0, dtype=np.float32)),
        helper.make_node("Unsqueeze", ["query", "axis1"], ["q3"]),
        helper.make_node("Mul", ["q3", "candidates"], ["prod"]),
        helper.make_node("ReduceSum", ["prod", "axis_last"], ["dot"], keepdims=0),
        helper.make_node("Mul", ["q3", "q3"], ["qq"]),
        helper.make_node("ReduceSum", ["qq", "axis_last"], ["qn2"], keepdims=0),
        helper.make_node("Mul", ["candidates", "candidates"], ["cc"]),
        helper.make_node("ReduceSum", ["cc", "axis_last"], ["cn2"], keepdims=0),
        helper.make_node("Max", ["qn2", "tiny"], ["qn2c"]),
        helper.make_node("Max", ["cn2", "tiny"], ["cn2c"]),
        helper.make_node("Sqrt", ["qn2c"], ["qn"]),
        helper.make_node("Sqrt", ["cn2c"], ["cn"]),
        helper.make_node("Mul", ["qn", "cn"], ["den"]),
        helper.make_node("Div", ["dot", "den"], ["score"]),
        helper.make_node("Sub", ["one", "score"], ["distance"]),
    ]
    return _scorer(nodes)


def _scorer(nodes: list[onnx.NodeProto]) -> bytes:
    inputs = [
        helper.make_tensor_value_info("query", TensorProto.FLOAT, ["n", "dim"]),
        helper.make_tensor_value_info("candidates", TensorProto.FLOAT, ["n", "m", "dim"]),
    ]
    outputs = [
        helper.make_tensor_value_info("score", TensorProto.FLOAT, ["n", "m"]),
        helper.make_tensor_value_info("distance", TensorProto.FLOAT, ["n", "m"]),
    ]
    return _model(nodes, inputs, outputs)


def make_model(
    directory: Path,
    vocab: Sequence[str],
    embeddings: np.ndarray,
    *,
    geometry: str = "poincare",
    max_norm: float = 0.999,
    w_f: float = 1.0,
    b_f: float = 0.0,
    name: str = "tiny-test-model",
) -> Path:
    """Write a complete model directory with a word tokenizer over ``vocab``."""
    tokenizer = Tokenizer(list(vocab), kind="word")
    if geometry == "poincare":
        enc = encoder_graph(embeddings, max_norm=max_norm)
        scorer = poincare_scorer_graph(w_f, b_f)
        geo = {"name": "poincare", "max_norm": max_norm}
        score = {"formula": "-(w_f * d + b_f)", "higher_is_better": True, "parameters": {"w_f": w_f, "b_f": b_f}}
    else:
        enc = encoder_graph(embeddings, max_norm=None)
        scorer = cosine_scorer_graph()
        geo = {"name": "cosine"}
        score = {"formula": "cos", "higher_is_better": True, "parameters": {}}
    return write_model(
        directory,
        name=name,
        geometry=geo,
        dimension=int(embeddings.shape[1]),
        tokenizer=tokenizer,
        max_tokens={"question": 16, "answer": 32},
        encoder=enc,
        scorer=scorer,
        score=score,
        training={"note": "built by tests/helpers/onnx_models.py"},
        parameters={"trainable": 0, "total": int(embeddings.size)},
    )


def random_ball(rng: np.random.Generator, n: int, dim: int, *, max_norm: float = 0.999) -> np.ndarray:
    """Points with norms spread over (0, max_norm], many close to it, some in tight clusters."""
    directions = rng.normal(size=(n, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    norms = np.concatenate(
        [
            rng.uniform(0.0, 0.9, n // 2),
            max_norm - rng.uniform(0.0, 0.02, n - n // 2),
        ]
    )
    points = directions * norms[:, None]
    # a tight cluster near the boundary, where float32 inner products cancel
    c = max(2, n // 10)
    centre = directions[0] * (max_norm - 1e-4)
    points[-c:] = centre + rng.normal(scale=1e-3, size=(c, dim))
    over = np.linalg.norm(points, axis=1) > max_norm
    points[over] *= (max_norm / np.linalg.norm(points[over], axis=1))[:, None]
    return points.astype(np.float32)


def point_model(directory: Path, points: np.ndarray, **kwargs: object) -> tuple[Path, list[str]]:
    """A model where the one-word text ``p<i>`` encodes to ``points[i]`` exactly."""
    words = [f"p{i}" for i in range(len(points))]
    vocab = ["[PAD]", "[UNK]", *words]
    emb = np.zeros((len(vocab), points.shape[1]), dtype=np.float32)
    emb[2:] = points
    return make_model(directory, vocab, emb, **kwargs), words  # type: ignore[arg-type]


def broken_model(
    directory: Path, words: Sequence[str], poison: Sequence[str], *, value: float = float("nan"), **kwargs: object
) -> Path:
    """A model whose encoder emits ``value`` (NaN by default, or ±inf) for any text holding a
    ``poison`` word, and finite vectors for texts of the other ``words``: a broken model."""
    vocab = Tokenizer.build_word_vocab([*words, *poison])
    emb = np.random.default_rng(3).normal(scale=0.15, size=(len(vocab), 6)).astype(np.float32)
    emb[0] = 0.0
    for word in poison:
        emb[vocab.index(word)] = value
    return make_model(directory, vocab, emb, **kwargs)  # type: ignore[arg-type]


def _rewired(graph: bytes, output: str, nodes: list[onnx.NodeProto], kind: int = TensorProto.FLOAT) -> bytes:
    """``graph`` with its output ``output`` renamed ``{output}_raw`` and computed from it by ``nodes``."""
    model = onnx.load_from_string(graph)
    for node in model.graph.node:
        node.output[:] = [f"{output}_raw" if name == output else name for name in node.output]
    model.graph.node.extend(nodes)
    for value in model.graph.output:
        if value.name == output:
            value.type.tensor_type.elem_type = kind
            if output == "vectors":
                value.type.tensor_type.shape.dim[0].dim_param = "rows"
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def faulty_model(directory: Path, words: Sequence[str], fault: str) -> Path:
    """A Poincaré model over ``words`` with one fault: ``one-row`` (the encoder returns one
    vector, the batch's mean, for any batch), ``int64`` (integer vectors), ``outside`` (the
    encoder's vectors have norm about 2, outside the ball), ``inf-score`` / ``nan-score`` (the
    scorer's scores are -inf / NaN)."""
    vocab = Tokenizer.build_word_vocab(list(words))
    emb = np.random.default_rng(5).normal(scale=0.15, size=(len(vocab), 6)).astype(np.float32)
    emb[0] = 0.0
    encoder = encoder_graph(emb, max_norm=0.999)
    scorer = poincare_scorer_graph()
    if fault == "one-row":
        encoder = _rewired(
            encoder, "vectors", [helper.make_node("ReduceMean", ["vectors_raw"], ["vectors"], axes=[0], keepdims=1)]
        )
    elif fault == "int64":
        encoder = _rewired(
            encoder, "vectors", [helper.make_node("Cast", ["vectors_raw"], ["vectors"], to=TensorProto.INT64)],
            TensorProto.INT64,
        )  # fmt: skip
    elif fault == "outside":
        big = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), TINY32) * 2.0
        big[0] = 0.0
        encoder = encoder_graph(big.astype(np.float32), max_norm=None)
    elif fault in ("inf-score", "nan-score"):
        value = -np.inf if fault == "inf-score" else np.nan
        scorer = _rewired(scorer, "score", [
            _const("bad", np.array(value, dtype=np.float32)),
            helper.make_node("Add", ["score_raw", "bad"], ["score"]),
        ])  # fmt: skip
    else:
        raise ValueError(f"unknown fault {fault!r}")
    return write_model(
        directory, name=f"faulty-{fault}", geometry={"name": "poincare", "max_norm": 0.999}, dimension=6,
        tokenizer=Tokenizer(vocab, kind="word"), max_tokens={"question": 16, "answer": 32}, encoder=encoder,
        scorer=scorer, score={"formula": "-d", "higher_is_better": True, "parameters": {}},
    )  # fmt: skip
