"""Signals of the sample GM-100 episodes: per-arm motion programs (minimum-jerk legs inside per-type windows) and
the LeRobot state/action vectors written to each episode's parquet (`gm100.py` writes them)."""

from __future__ import annotations

import numpy as np

from .common import rng_for

GRIP_MAX_M = 0.066  # the Cobot Magic gripper's full opening (effector.position on the real files)

HOME = {
    "left": np.array([0.0, 0.0, 0.25, 0.0, 0.45, 0.0]),
    "right": np.array([0.0, 0.0, 0.25, 0.0, -0.45, 0.0]),
}
LEGS = (
    ("approach", 0.17),
    ("grasp", 0.08),
    ("carry", 0.22),
    ("place", 0.10),
    ("release", 0.08),
    ("retreat", 0.15),
    ("return", 0.15),
    ("settle", 0.05),
)

# ---------------------------------------------------------------------------- signals


def _min_jerk(k: int) -> np.ndarray:
    tau = np.arange(1, k + 1) / k
    return 10 * tau**3 - 15 * tau**4 + 6 * tau**5


def _ramp(a: float, b: float, k: int) -> np.ndarray:
    return a + (b - a) * _min_jerk(max(1, k))


def _windows(rng: np.random.Generator, task_type: str, n: int, fps: float) -> dict[str, tuple[int, int]]:
    pre = int(np.ceil(n * rng.uniform(0.12, 0.16)))
    post = int(np.ceil(n * rng.uniform(0.12, 0.16)))
    lo, hi = pre, n - post
    span = hi - lo
    if task_type == "single_left":
        return {"left": (lo, hi)}
    if task_type == "single_right":
        return {"right": (lo, hi)}
    first, second = ("left", "right") if rng.random() < 0.5 else ("right", "left")
    if task_type == "bimanual_sequential":
        cut_a = lo + int(span * rng.uniform(0.6, 0.65))
        cut_b = lo + int(span * rng.uniform(0.35, 0.4))
        return {first: (lo, cut_a), second: (cut_b, hi)}
    if task_type == "bimanual_sync":
        lag = max(2, int(round(fps * rng.uniform(0.07, 0.2))))  # same motion, the second arm a few frames late
        return {first: (lo, hi - lag), second: (lo + lag, hi)}
    raise ValueError(task_type)


def _shape(rng: np.random.Generator) -> dict:
    """The random parameters of one manipulation (shared by both arms of a bimanual_sync episode)."""
    return {
        "weights": np.array([w for _, w in LEGS]) * rng.uniform(0.8, 1.25, len(LEGS)),
        "s_a": float(rng.choice([-1.0, 1.0])),
        "s_b": float(rng.choice([-1.0, 1.0])),
        "v_approach": rng.uniform(0.6, 0.95),
        "v_carry": rng.uniform(0.6, 0.95),
        "v_place": rng.uniform(0.4, 0.5),
        "wrist": rng.uniform(-0.15, 0.15, 3),
        "g_open": rng.uniform(0.065, 0.08),
        "g_obj": rng.uniform(0.015, 0.03),
    }


def _arm_program(n: int, fps: float, home: np.ndarray, window: tuple[int, int] | None, shape: dict | None):
    """Clean per-frame arrays for one arm: position (n,6), gripper opening (n,), commanded gripper (n,), and the
    effort drop as a fraction of the full hold drop (n,) in [0, 1]."""
    pos = np.tile(home, (n, 1))
    g_idle = 0.035
    grip = np.full(n, g_idle)
    cmd = np.full(n, g_idle)
    drop = np.zeros(n)
    if window is None:
        return pos, grip, cmd, drop
    start, stop = window
    total = stop - start
    if total < 3 * len(LEGS):
        raise ValueError(f"active window of {total} frames is too short for one manipulation ({3 * len(LEGS)})")
    w = shape["weights"]
    dur = np.maximum(3, np.floor(w / w.sum() * total)).astype(int)
    dur[int(np.argmax(dur))] += total - int(dur.sum())
    s_a, s_b = shape["s_a"], shape["s_b"]
    g_open, g_obj = shape["g_open"], shape["g_obj"]
    cur = home.copy()
    moved = np.zeros(6)
    t = start
    for (leg, _), k in zip(LEGS, dur):
        sl = slice(t, t + k)
        prof = _min_jerk(k)
        delta = np.zeros(6)
        if leg == "approach":
            amp = min(0.6, shape["v_approach"] * k / fps)
            delta[:3] = (0.0, s_a * amp, -0.3 * amp)
        elif leg == "carry":
            amp = min(0.6, shape["v_carry"] * k / fps)
            delta[:3] = (s_b * amp, 0.0, 0.3 * amp)
            delta[3:6] = shape["wrist"]
        elif leg == "place":
            amp = min(0.3, shape["v_place"] * k / fps)
            delta[:3] = (s_b * 0.5 * amp, 0.0, -0.85 * amp)
        elif leg == "retreat":
            delta[1] = -moved[1]
            delta[2] = -moved[2]
        elif leg == "return":
            delta[0] = -moved[0]
            delta[3:6] = -moved[3:6]
        pos[sl] = cur + prof[:, None] * delta
        cur = cur + delta
        moved += delta
        # gripper and effort
        if leg == "approach":
            grip[sl] = _ramp(g_idle, g_open, k)
            cmd[sl] = grip[sl]
        elif leg == "grasp":
            half = max(1, k // 2)
            grip[t:t + half] = _ramp(g_open, g_obj, half)
            grip[t + half:t + k] = g_obj
            cmd[sl] = 0.0
            d0 = int(k * 0.4)
            r = min(4, k - d0)
            drop[t + d0:t + d0 + r] = _ramp(0.0, 1.0, r)
            drop[t + d0 + r:t + k] = 1.0
        elif leg in ("carry", "place"):
            grip[sl] = g_obj
            cmd[sl] = 0.0
            drop[sl] = 1.0
        elif leg == "release":
            half = max(1, k // 2)
            grip[t:t + half] = _ramp(g_obj, g_open, half)
            grip[t + half:t + k] = g_open
            cmd[sl] = g_open
            d0 = int(k * 0.3)
            r = min(4, k - d0)
            drop[t:t + d0] = 1.0
            drop[t + d0:t + d0 + r] = _ramp(1.0, 0.0, r)
        elif leg == "retreat":
            grip[sl] = _ramp(g_open, g_idle, k)
            cmd[sl] = grip[sl]
        t += k
    pos[stop:] = cur
    return pos, grip, cmd, drop


def episode_signals(seed: int, task_id: str, task_type: str, episode: int, n: int, fps: float) -> dict:
    """All parquet signal columns of one episode (float32 matrices) plus the clean per-arm gripper opening.

    Deterministic from (seed, task_id, episode); used by `write` and by the tests of the label-rule coverage.
    """
    rng = rng_for(seed, "gm100", "signals", task_id, episode)
    windows = _windows(rng, task_type, n, fps)
    shared = _shape(rng) if task_type == "bimanual_sync" else None
    arm_pos, arm_grip, arm_cmd, arm_drop = {}, {}, {}, {}
    for arm in ("left", "right"):
        home = HOME[arm] + rng.normal(0, 0.02, 6)
        shape = shared if shared is not None else _shape(rng)
        arm_pos[arm], arm_grip[arm], arm_cmd[arm], arm_drop[arm] = _arm_program(n, fps, home, windows.get(arm), shape)
    position = np.concatenate([arm_pos["left"], arm_pos["right"]], axis=1)
    velocity = np.gradient(position, axis=0) * fps if n > 1 else np.zeros_like(position)
    base = rng.uniform(1.4, 2.4, 2)
    depth = rng.uniform(0.8, 1.4, 2)
    effort = np.stack([base[i] - depth[i] * arm_drop[a] for i, a in enumerate(("left", "right"))], axis=1)
    holding = np.stack([arm_drop["left"], arm_drop["right"]], axis=1)
    effort += 0.04 * holding * np.sin(np.arange(n) / 7.0)[:, None]
    gripper = np.stack([arm_grip["left"], arm_grip["right"]], axis=1)
    command = np.stack([arm_cmd["left"], arm_cmd["right"]], axis=1)
    command = np.concatenate([command[2:], np.repeat(command[-1:], min(2, n), axis=0)])[:n]
    action_pos = np.concatenate([position[2:], np.repeat(position[-1:], min(2, n), axis=0)])[:n]
    gravity = rng.uniform(-2.0, 2.0, 12)
    load = np.repeat(holding, 6, axis=1) * 0.3
    arm_effort = gravity + load + np.abs(velocity) * 0.2

    noisy = {
        "observation.state.effector.effort": effort + rng.normal(0, 0.015, effort.shape),
        "observation.state.arm.velocity": velocity + rng.normal(0, 0.004, velocity.shape),
        "observation.state.arm.position": position + rng.normal(0, 3e-4, position.shape),
        "action.arm.position": action_pos,
        # the opening in metres as the real files hold it: [left, right], within the gripper's stroke 0 .. 0.066
        "observation.state.effector.position": np.clip(gripper + rng.normal(0, 2e-4, gripper.shape), 0.0, GRIP_MAX_M),
        "observation.state.arm.effort": arm_effort + rng.normal(0, 0.02, arm_effort.shape),
        "action.effector.position": command,
    }
    out = {k: v.astype(np.float32) for k, v in noisy.items()}
    out["_windows"] = windows
    out["_gripper_clean"] = gripper
    return out
