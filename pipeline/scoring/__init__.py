"""Scoring predictions: the multiple-choice report (mcq), the bias-free scores (bias), the cluster bootstrap (bootstrap) and CircularEval (circular)."""
