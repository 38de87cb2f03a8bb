"""ONNX export: a trained model, a token table or a sentence-transformers directory to a
qaindex model directory, through one graph stage, a parity check and the runtime's writer."""
