"""Training (PyTorch) and ONNX export for qaindex models; installed as ``qaindex_export``."""
