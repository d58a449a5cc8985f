"""Scoring predictions: the multiple-choice report (mcq), the step track's scorer (steps), the bias-free scores (bias), the cluster bootstrap (bootstrap) and CircularEval (circular)."""
