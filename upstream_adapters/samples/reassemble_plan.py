"""Plan and motion of the sample REASSEMBLE recordings: the corpora's recording specs, the segment plans with the
real label vocabulary, and the robot kinematics that follow the labels (written out by `reassemble.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .common import rng_for, scaled

SLUG = "reassemble"
OBJECTS = (
    "round peg 1", "round peg 2", "round peg 3", "round peg 4",
    "square peg 1", "square peg 2", "square peg 3", "square peg 4",
    "BNC", "D-SUB", "USB", "Ethernet", "waterproof", "bolt",
    "large gear", "medium gear", "small gear",
)
LOW_VOCAB = ("Approach", "Align", "Grasp", "Lift", "Pull", "Push", "Release", "Twist", "Nudge")
NO_ACTION = "No action."
CAMERAS = ("hama1", "hama2", "hand", "capture_node-camera-image")
# Native rates of the real release (Hz); the samples divide them by the scale's `rate_div`.
RATES = {
    "measured_force": 1000.0, "measured_torque": 1000.0,
    "joint_positions": 970.0, "joint_velocities": 970.0, "joint_efforts": 970.0,
    "gripper_positions": 970.0, "gripper_velocities": 970.0, "gripper_efforts": 970.0,
    "pose": 580.0, "velocity": 580.0,
    "compensated_base_force": 465.0, "compensated_base_torque": 465.0,
}
# Older files: one dataset per axis (REASSEMBLE/io.py merge_dict_keys), timestamps per axis key too.
PER_AXIS = {
    "measured_force": ["measured_force_x", "measured_force_y", "measured_force_z"],
    "measured_torque": ["measured_torque_x", "measured_torque_y", "measured_torque_z"],
    "compensated_base_force": ["compensated_base_force_x", "compensated_base_force_y", "compensated_base_force_z"],
    "compensated_base_torque": ["compensated_base_torque_x", "compensated_base_torque_y", "compensated_base_torque_z"],
    "pose": ["pose_x", "pose_y", "pose_z", "pose_qw", "pose_qx", "pose_qy", "pose_qz"],
    "velocity": ["vel_x", "vel_y", "vel_z", "vel_qx", "vel_qy", "vel_qz"],
}
VIENNA_UTC_OFFSET_S = 3600  # recording ids are local time (CET, January)

SCALES = {
    # frame sizes (w, h) per camera, robot-rate divisor, time scale of the skills, actions per recording
    "tiny": dict(hand=(64, 48), hama=(64, 48), event=(64, 48), rate_div=20.0, tscale=0.45, actions=(2, 3),
                 max_dur=9.0, events_per_s=40),
    "demo": dict(hand=(128, 96), hama=(96, 72), event=(88, 64), rate_div=5.0, tscale=0.95, actions=(5, 5),
                 max_dur=29.0, events_per_s=100),
    # release: ~33 actions in ~4.5 min per recording, as the real 4,551 actions / 149 recordings / 781 min
    "release": dict(hand=(64, 48), hama=(64, 48), event=(64, 48), rate_div=10.0, tscale=1.4, actions=(31, 35),
                    max_dur=285.0, events_per_s=60),
}

SKILL_DUR = {  # seconds at tscale 1
    "Approach": (1.2, 2.2), "Align": (0.8, 1.5), "Grasp": (0.5, 0.9), "Lift": (0.6, 1.1), "Push": (0.8, 1.4),
    "Twist": (1.0, 1.8), "Nudge": (0.5, 0.9), "Pull": (0.7, 1.3), "Release": (0.4, 0.8),
}
OPEN_W = 0.08  # Franka hand fully open (m), two fingers of 0.04


@dataclass
class RecSpec:
    rec_id: str
    splits: tuple[str, ...] = ("test_split1",)
    hand: bool = True
    leading_no_action: bool = True
    per_axis: bool = False
    ts_2d: bool = False
    hand_late: bool = False
    force_failure: bool = False


@dataclass
class Seg:
    text: str
    start: float
    end: float
    success: bool = True
    low: list = field(default_factory=list)  # [Seg]


# ---------------------------------------------------------------------------------------------- corpora
def _demo_specs() -> list[RecSpec]:
    return [
        RecSpec("2025-01-09-13-57-17"),
        RecSpec("2025-01-09-14-12-03", per_axis=True, ts_2d=True),
        RecSpec("2025-01-10-15-28-50", hand_late=True),
        RecSpec("2025-01-10-16-17-40", hand=False),
        RecSpec("2025-01-10-17-54-09", leading_no_action=False),
        RecSpec("2025-01-11-14-43-37", force_failure=True),
        RecSpec("2025-01-11-15-02-11", splits=("train_split1",)),
    ]


def _release_specs(seed: int, units_factor: int | float = 1) -> list[RecSpec]:
    tests = scaled(37, units_factor, SLUG, "test_split1 recording")
    if tests < 4:  # the four planted test_split1 cases below
        raise ValueError(f"units factor {units_factor:g} leaves {SLUG} {tests} test_split1 recording(s), fewer than "
                         "the 4 cases the release scale plants in it")
    special = {
        "2025-01-10-15-28-50": dict(hand_late=True),
        "2025-01-10-17-10-38": dict(hand_late=True),
        "2025-01-10-16-17-40": dict(hand=False, splits=("train_split1",)),
        "2025-01-10-17-54-09": dict(leading_no_action=False),
        "2025-01-11-14-22-09": dict(leading_no_action=False),
    }
    rng = rng_for(seed, SLUG, "release-ids")
    ids: set[str] = set(special)

    def start_s(r: str) -> int:
        d, h, mi, s = (int(x) for x in r.split("-")[2:])
        return ((d * 24 + h) * 60 + mi) * 60 + s

    # units_factor K: 37 K recordings of test_split1 (the extra or missing ones in it alone); above K = 1 over
    # January's first 28 days
    days = (9, 14) if units_factor <= 1 else (1, 29)
    while len(ids) < tests + 4:
        day = int(rng.integers(*days))
        minute = int(rng.integers(9 * 60, 18 * 60))
        r = f"2025-01-{day:02d}-{minute // 60:02d}-{minute % 60:02d}-{int(rng.integers(0, 60)):02d}"
        if all(abs(start_s(r) - start_s(o)) >= 360 for o in ids):  # recordings last ~4-5 min: no overlaps
            ids.add(r)
    ordered = sorted(ids)
    plain = [r for r in ordered if r not in special]
    order = rng.permutation(len(plain))
    train = {plain[i] for i in order[:2]}
    neither = {plain[i] for i in order[2:3]}
    per_axis = {plain[i] for i in order[3:5]}
    specs = []
    for r in ordered:
        kw = dict(special.get(r, {}))
        if r in train:
            kw["splits"] = ("train_split1",)
        elif r in neither:
            kw["splits"] = ()
        if r in per_axis:
            kw.update(per_axis=True, ts_2d=True)
        specs.append(RecSpec(r, **kw))
    assert sum("test_split1" in s.splits for s in specs) == tests
    return specs


def specs_for(scale: str, seed: int = 0, units_factor: int | float = 1) -> list[RecSpec]:
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; known: {sorted(SCALES)}")
    if units_factor != 1 and scale != "release":
        raise ValueError(f"units_factor {units_factor} applies to the release scale only, not {scale!r}")
    return _release_specs(seed, units_factor) if scale == "release" else _demo_specs()


# ---------------------------------------------------------------------------------------------- plan
def _chain(verb: str, obj: str, rng: np.random.Generator) -> list[str]:
    if verb == "Pick":
        return ["Approach", "Align", "Grasp", "Lift"] if rng.random() < 0.3 else ["Approach", "Grasp", "Lift"]
    if verb == "Place":
        return ["Approach", "Release"] if rng.random() < 0.15 else ["Approach", "Align", "Release"]
    if verb == "Insert":
        if obj in ("BNC", "waterproof"):
            return ["Approach", "Align", "Push", "Twist", "Release"]
        if obj == "bolt":
            return ["Approach", "Align", "Twist", "Release"]
        if obj.endswith("gear") or obj.startswith("square"):
            return ["Approach", "Align", "Nudge", "Push", "Release"] if rng.random() < 0.6 else \
                ["Approach", "Align", "Push", "Release"]
        return ["Approach", "Align", "Push", "Nudge", "Release"] if rng.random() < 0.3 else \
            ["Approach", "Align", "Push", "Release"]
    # Remove
    if obj in ("BNC", "waterproof"):
        return ["Approach", "Grasp", "Twist", "Pull", "Lift"]
    if obj == "bolt":
        return ["Approach", "Grasp", "Twist", "Lift"]
    if obj == "Ethernet":
        return ["Approach", "Grasp", "Push", "Pull", "Lift"]
    if rng.random() < 0.7:
        return ["Approach", "Grasp", "Pull", "Lift"]
    return ["Approach", "Align", "Grasp", "Pull", "Lift"]


def _failed_chain(verb: str, chain: list[str]) -> list[str]:
    if verb == "Pick":  # the grasp misses
        return chain[: chain.index("Grasp") + 1]
    if verb == "Insert":  # pushed but never seated
        cut = chain.index("Release")
        return chain[:cut]
    return chain[: chain.index("Pull") + 1] if "Pull" in chain else chain[: chain.index("Grasp") + 1]


def plan_recording(rng: np.random.Generator, scale: str, leading_no_action: bool = True,
                   force_failure: bool = False) -> list[Seg]:
    """High-level segments (with low-level children) on a clock starting at 0 (the robot streams' start)."""
    cfg = SCALES[scale]
    ts = cfg["tscale"]
    n_actions = int(rng.integers(cfg["actions"][0], cfg["actions"][1] + 1))
    on_board = {o: bool(rng.random() < 0.5) for o in OBJECTS}
    held: str | None = None
    held_verb = ""
    forced_at = int(rng.integers(1, max(2, n_actions - 1))) if force_failure else -1
    segs: list[Seg] = []
    t = 0.3
    if leading_no_action:
        d = float(rng.uniform(1.0, 2.0)) * ts
        segs.append(Seg(NO_ACTION, t, t + d))
        t += d
    k = 0
    obj = ""
    while k < n_actions:
        if held is None:
            # a different object than the last one most of the time
            choices = [o for o in OBJECTS if o != obj] if obj else list(OBJECTS)
            obj = str(choices[int(rng.integers(len(choices)))])
            verb = "Remove" if on_board[obj] else "Pick"
        else:
            obj = held
            verb = "Insert" if held_verb == "Pick" else "Place"
        chain = _chain(verb, obj, rng)
        failable = verb != "Place"
        if k == forced_at and not failable:
            forced_at += 1  # Place never fails: force the next action instead
        fails = failable and (k == forced_at or (forced_at < 0 and rng.random() < 0.09))
        if fails:
            chain = _failed_chain(verb, chain)
        elif rng.random() < 0.05 and "Align" in chain:  # a repeated skill, as re-annotated retries look
            i = chain.index("Align")
            chain = chain[: i + 1] + ["Align"] + chain[i + 1:]
        lows = []
        t_low = t
        for j, name in enumerate(chain):
            lo, hi = SKILL_DUR[name]
            d = float(rng.uniform(lo, hi)) * ts
            last = j == len(chain) - 1
            lows.append(Seg(name, t_low, t_low + d, success=not (fails and last)))
            t_low += d
        segs.append(Seg(f"{verb} {obj}.", t, t_low, success=not fails, low=lows))
        t = t_low
        if not fails:
            if verb in ("Pick", "Remove"):
                held, held_verb = obj, verb
            else:
                on_board[obj] = verb == "Insert"
                held, held_verb = None, ""
        elif verb == "Remove":
            held = None  # the gripper slipped off; the object stays in the board
        k += 1
        # "No action." between actions, and a trailing one
        d = float(rng.uniform(1.0, 2.2)) * ts
        segs.append(Seg(NO_ACTION, t, t + d))
        t += d
        if t > cfg["max_dur"] - 6 * ts:
            break  # a carried object is finished below, so the recording stays within max_dur + one action
    # finish a carried object so that the recording ends with the gripper open
    if held is not None:
        verb = "Insert" if held_verb == "Pick" else "Place"
        chain = _chain(verb, held, rng)
        lows, t_low = [], t
        for name in chain:
            lo, hi = SKILL_DUR[name]
            d = float(rng.uniform(lo, hi)) * ts
            lows.append(Seg(name, t_low, t_low + d))
            t_low += d
        segs.append(Seg(f"{verb} {held}.", t, t_low, low=lows))
        t = t_low
        d = float(rng.uniform(1.0, 2.2)) * ts
        segs.append(Seg(NO_ACTION, t, t + d))
    return segs


# ---------------------------------------------------------------------------------------------- kinematics
class Track:
    """Keyframed track: min-jerk (`smooth`) or linear interpolation between keyframes, hold outside."""

    def __init__(self, v0, smooth: bool):
        self.t = [0.0]
        self.v = [np.atleast_1d(np.asarray(v0, np.float64))]
        self.smooth = smooth

    @property
    def cur(self) -> np.ndarray:
        return self.v[-1].copy()

    def key(self, t: float, v) -> None:
        t = max(float(t), self.t[-1])
        self.t.append(t)
        self.v.append(np.atleast_1d(np.asarray(v, np.float64)))

    def hold(self, t: float) -> None:
        self.key(t, self.cur)

    def eval(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        T = np.asarray(self.t)
        V = np.stack(self.v)
        if T.size == 1:
            return np.repeat(V, q.size, 0), np.zeros((q.size, V.shape[1]))
        k = np.clip(np.searchsorted(T, q, side="right") - 1, 0, T.size - 2)
        ta, tb = T[k], T[k + 1]
        span = np.where(tb > ta, tb - ta, 1.0)
        s = np.where(tb > ta, np.clip((q - ta) / span, 0.0, 1.0), 1.0)
        inside = (s > 0) & (s < 1)
        if self.smooth:
            b = s ** 3 * (10 - 15 * s + 6 * s * s)
            db = 30 * s * s * (1 - s) ** 2 / span
        else:
            b = s
            db = 1.0 / span
        db = np.where(inside, db, 0.0)
        dv = V[k + 1] - V[k]
        return V[k] + b[:, None] * dv, db[:, None] * dv


def _locations(rng: np.random.Generator) -> tuple[dict, dict]:
    board = {}
    for i, o in enumerate(OBJECTS):  # the NIST board is fixed: a 4 x 5 grid
        r, c = divmod(i, 5)
        board[o] = np.array([0.50 + 0.05 * r, -0.12 + 0.06 * c, 0.10])
    tray = {}
    for o in OBJECTS:  # loose parts on both sides of the board, per recording
        side = 1.0 if rng.random() < 0.5 else -1.0
        tray[o] = np.array([rng.uniform(0.30, 0.42), side * rng.uniform(0.18, 0.30), 0.03])
    return board, tray


def simulate(segs: list[Seg], rng: np.random.Generator) -> dict[str, Track]:
    board, tray = _locations(rng)
    home = np.array([0.45, 0.0, 0.30])
    pos = Track(home, smooth=True)
    yaw = Track(0.0, smooth=True)
    width = Track(OPEN_W, smooth=False)
    effort = Track(0.0, smooth=False)
    contact = Track([0.0, 0.0, 0.0], smooth=False)  # contact force on the F/T sensor (N)
    holding = False
    for seg in segs:
        a, b = seg.start, seg.end
        if seg.text == NO_ACTION:
            for tr in (pos, yaw, width, effort, contact):
                tr.hold(a)
            if not holding and width.cur[0] < OPEN_W - 1e-3:  # reopen after a missed grasp (no arm motion)
                width.key(a + 0.4 * (b - a), OPEN_W)
                effort.key(a + 0.4 * (b - a), 0.0)
            for tr in (pos, yaw, width, effort, contact):
                tr.hold(b)
            continue
        verb, obj = seg.text.rstrip(".").split(" ", 1)
        loc = board[obj] if verb in ("Insert", "Remove") else tray[obj]
        carry = np.array([0.0, 0.0, rng.uniform(0.6, 1.6)])
        for low in seg.low:
            la, end = low.start, low.end
            backoff = not low.success and verb == "Insert"  # pushed but not seated: back off, still holding
            lb = la + 0.7 * (end - la) if backoff else end
            d = lb - la
            for tr in (pos, yaw, width, effort, contact):
                tr.hold(la)
            p = pos.cur
            name = low.text
            if name == "Approach":
                off = rng.normal(0, 0.004, 3) * np.array([1, 1, 0])
                pos.key(lb, loc + np.array([0, 0, 0.05]) + off)
            elif name == "Align":
                side = rng.normal(0, 0.006, 3) * np.array([1, 1, 0])
                pos.key(la + 0.5 * d, loc + side + np.array([0, 0, 0.02]))
                pos.key(lb, loc + np.array([0, 0, 0.008]))
                f = rng.uniform(3.0, 6.0) if verb != "Pick" else rng.uniform(1.5, 3.0)
                contact.key(la + 0.35 * d, carry * holding + np.array([0.3, -0.2, f]))
            elif name == "Grasp":
                closed = 0.002 if not low.success else rng.uniform(0.010, 0.030)
                width.key(la + 0.6 * d, closed)
                effort.key(la + 0.6 * d, rng.uniform(20.0, 35.0) if low.success else 2.0)
                contact.key(la + 0.6 * d, np.array([0.1, 0.1, rng.uniform(1.0, 2.0)]))
                if low.success:
                    holding = True
            elif name == "Lift":
                pos.key(lb, p + np.array([0, 0, rng.uniform(0.06, 0.10)]))
                contact.key(la + 0.3 * d, carry)
            elif name == "Push":
                pos.key(lb, p - np.array([0, 0, rng.uniform(0.012, 0.020)]))
                peak = rng.uniform(12.0, 25.0)
                contact.key(la + 0.6 * d, carry * holding + np.array([0.5, -0.4, peak]))
                contact.key(lb, carry * holding + np.array([0.4, -0.3, 0.8 * peak]))
            elif name == "Twist":
                yaw.key(lb, yaw.cur + (np.pi / 2 if rng.random() < 0.5 else -np.pi / 2))
                contact.key(la + 0.3 * d, carry * holding + np.array([0.8, 0.6, rng.uniform(5.0, 9.0)]))
            elif name == "Nudge":
                amp = rng.uniform(0.003, 0.006)
                for frac, sgn in ((0.25, 1), (0.5, -1), (0.75, 1)):
                    pos.key(la + frac * d, p + np.array([sgn * amp, -sgn * amp, 0]))
                pos.key(lb, p)
                contact.key(la + 0.3 * d, carry * holding + np.array([1.0, -1.0, rng.uniform(4.0, 7.0)]))
            elif name == "Pull":
                peak = rng.uniform(10.0, 20.0)
                pos.key(la + 0.7 * d, p + np.array([0, 0, 0.006]))
                contact.key(la + 0.7 * d, np.array([0.3, 0.3, -peak]))
                pos.key(lb, p + np.array([0, 0, 0.03]))
                if low.success:
                    contact.key(lb, carry)
                else:  # slips off: gripper opens, nothing held
                    contact.key(lb, np.zeros(3))
                    width.key(lb, OPEN_W)
                    effort.key(lb, 0.0)
                    holding = False
            elif name == "Release":
                width.key(la + 0.6 * d, OPEN_W)
                effort.key(la + 0.6 * d, 0.0)
                contact.key(la + 0.4 * d, np.zeros(3))
                pos.key(la + 0.6 * d, p)
                pos.key(lb, p + np.array([0, 0, 0.015]))
                holding = False
            if backoff:
                for tr in (pos, yaw, width, effort, contact):
                    tr.hold(lb)
                pos.key(end, pos.cur + np.array([0, 0, 0.03]))
                contact.key(end, carry)
        for tr in (pos, yaw, width, effort, contact):
            tr.hold(b)
    return {"pos": pos, "yaw": yaw, "width": width, "effort": effort, "contact": contact}
