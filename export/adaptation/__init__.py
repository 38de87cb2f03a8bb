"""Fitting a model directory to a user's corpus: adaptation (label-free or labelled, never
worse than its start), its settings, start point, teachers and epoch choice, and label-free
calibration data."""
