"""ONNX export: a trained model (or a sentence-transformers directory) to a qaindex model
directory, through one pipeline of graph, parity check and atomic write."""
