"""Regeneration check: rebuild the demo release from the sample corpora and compare its checksums with the committed
lock (tests/regen/demo.sha256). `python tests/regen.py check` fails with the list of files that changed;
`python tests/regen.py lock` rewrites the lock after a deliberate change (commit it with that change)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "tests" / "regen" / "demo.sha256"


def build(out: Path, env: dict[str, str] | None = None, capture: bool = False) -> Path:
    """The demo release built from the sample corpora into `out/release` (work folder `out/work`); `env` replaces the
    environment of the build process, `capture` keeps its output off the terminal."""
    release = out / "release"
    cmd = [
        sys.executable,
        "-m",
        "assets.cli",
        "build",
        "--samples",
        "--scale",
        "demo",
        "--work-dir",
        str(out / "work"),
        "--release-dir",
        str(release),
    ]
    subprocess.run(cmd, check=True, cwd=REPO, env=env, capture_output=capture)
    return release


def parse(text: str) -> dict[str, str]:
    return {line.split("  ", 1)[1]: line.split("  ", 1)[0] for line in text.splitlines() if line.strip()}


def main(mode: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        release = build(Path(tmp))
        current = (release / "checksums.sha256").read_text()
        if mode == "lock":
            LOCK.parent.mkdir(parents=True, exist_ok=True)
            LOCK.write_text(current)
            print(f"lock written: {LOCK.relative_to(REPO)} ({len(parse(current))} files)")
            return 0
        if not LOCK.exists():
            print("no lock yet: run `make regen-lock` and commit tests/regen/demo.sha256")
            return 1
        want, got = parse(LOCK.read_text()), parse(current)
        changed = sorted(f for f in set(want) | set(got) if want.get(f) != got.get(f))
        if changed:
            print("release files changed against the lock:")
            for f in changed:
                print(f"  {f}: {want.get(f, 'absent')[:12]} -> {got.get(f, 'absent')[:12]}")
            print("if the change is deliberate: make regen-lock, and commit the lock with it")
            return 1
        print(f"regeneration identical to the lock ({len(got)} files)")
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "check"))
