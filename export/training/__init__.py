"""Training: the one epoch loop every trainer runs; labelled training, training against a
sentence teacher and the built-in model's token table on it; their data, negatives,
evaluation, result and checkpoints."""
