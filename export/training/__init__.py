"""Training: the one epoch loop every trainer runs, labelled training and training against a
sentence teacher, their data, negatives, evaluation, result and checkpoints."""
