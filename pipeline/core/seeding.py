"""Deterministic randomness: every RNG is seeded from (release seed, stage, key...), never from time or order."""

from __future__ import annotations

import hashlib
import random

import numpy as np


def stable_hash(*parts: object, n: int = 16) -> str:
    """Hex digest of the parts' reprs; stable across runs, machines and library versions (unlike pl.Expr.hash)."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:n]


def seed_for(seed: int, stage: str, *key: object) -> int:
    return int(stable_hash(seed, stage, *key, n=16), 16)


def rng(seed: int, stage: str, *key: object) -> np.random.Generator:
    return np.random.default_rng(seed_for(seed, stage, *key))


def py_rng(seed: int, stage: str, *key: object) -> random.Random:
    return random.Random(seed_for(seed, stage, *key))
