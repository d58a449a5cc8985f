"""The path / identity leak scanner shared by the writers, the validator and the asset checks.

find_path_leaks("see /home/alice/x")              # ["absolute path '/home/alice/x'"]
"""

from __future__ import annotations

import functools
import getpass
import os
import re
import socket
import tempfile
from pathlib import Path


_ABS_ROOTS = (
    "home",
    "root",
    "tmp",
    "work",
    "Users",
    "mnt",
    "media",
    "data",
    "scratch",
    "private",
    "Volumes",
    "var",
    "opt",
    "srv",
    "nfs",
    "gpfs",
    "lustre",
    "storage",
    "workspace",
    "content",
    "kaggle",
    "net",
)
_TAIL = r"[^\s\"'`,;)\]}>]*"
# (description, pattern, characters that must NOT precede the match, whether the char before the match must be a
# letter that is itself not preceded by a letter/digit (drive letters)). Every pattern starts with a literal so that
# `re` can skip ahead quickly: release tables are tens of megabytes of text. The drive letter is asked for inside the
# pattern too: a jsonl mirror holds hundreds of thousands of `\":\"` (JSON inside a JSON string), each a match to
# look at in Python otherwise.
_PATTERNS = (
    ("absolute path", re.compile(r"/(?:%s)(?![\w.-])%s" % ("|".join(_ABS_ROOTS), _TAIL)), set("._~/\\-"), False),
    ("Windows path", re.compile(r":(?<=[A-Za-z]:)(?:\\\\|\\|/)%s" % _TAIL), None, True),
    ("UNC path", re.compile(r"\\\\[A-Za-z0-9_.$-]+\\%s" % _TAIL), set("\\"), False),
    ("file URL", re.compile(r"file:/%s" % _TAIL), None, False),
    ("home-relative path", re.compile(r"~/%s" % _TAIL), set("~_"), False),
)
# Account / host names too generic to search for as words (a leak of their home folder is still an absolute path).
_GENERIC_NAMES = frozenset(
    {
        "root",
        "user",
        "admin",
        "ubuntu",
        "runner",
        "nobody",
        "jovyan",
        "vscode",
        "docker",
        "localhost",
        "build",
        "home",
        "work",
        "worker",
        "main",
        "test",
        "default",
        "node",
    }
)


@functools.lru_cache(maxsize=1)  # the user and host of a process do not change; asked once per text field checked
def _identity_tokens() -> list[str]:
    tokens = set()
    try:
        tokens.add(getpass.getuser())
    except Exception:  # noqa: BLE001 - no user database in some containers
        pass
    host = socket.gethostname()
    tokens.update({host, host.split(".")[0]})
    return sorted(t for t in tokens if t and len(t) >= 4 and t.lower() not in _GENERIC_NAMES)


_REPO = str(Path(__file__).resolve().parent.parent.parent)


def _local_dirs() -> list[str]:
    return _local_dirs_of(os.environ.get("HOME"), os.getcwd(), tempfile.gettempdir())


@functools.lru_cache(maxsize=8)  # asked once per text field checked; Path.home() costs more than the check itself
def _local_dirs_of(home_env: str | None, cwd: str, tmp: str) -> list[str]:
    dirs = {str(Path.home()), cwd, tmp, _REPO}
    return sorted(d for d in dirs if len(d) >= 5)


def _path_spans(text: str):
    """(start, end, description) of every absolute / home-relative path in `text` (the patterns above)."""
    for what, pat, not_before, drive in _PATTERNS:
        for m in pat.finditer(text):
            i = m.start()
            prev = text[i - 1] if i else ""
            if drive:
                before = text[i - 2] if i >= 2 else ""
                if not (prev.isascii() and prev.isalpha()) or (before.isascii() and before.isalnum()):
                    continue
                yield i - 1, m.end(), f"{what} {text[i - 1 : m.end()][:120]!r}"
                continue
            if prev and (prev.isalnum() or prev in (not_before or ())):
                continue
            yield i, m.end(), f"{what} {m.group(0)[:120]!r}"


def redact_paths(text: str, roots=()) -> str:
    """`text` made path-free for quarantine reasons and log lines: a path under one of `roots` (a source root)
    becomes relative to it, any other absolute path `<path>`, this machine's user / host name `<name>`."""
    for root in sorted({str(r) for r in roots if str(r) not in ("", ".", "/")}, key=len, reverse=True):
        text = text.replace(root.rstrip("/") + "/", "").replace(root, "<root>")
    spans = sorted(_path_spans(text))
    out, pos = [], 0
    for start, end, _ in spans:
        if start >= pos:
            out += [text[pos:start], "<path>"]
            pos = end
    text = "".join(out) + text[pos:]
    for tok in _identity_tokens():
        text = re.sub(r"(?<![A-Za-z0-9])%s(?![A-Za-z0-9])" % re.escape(tok), "<name>", text, flags=re.IGNORECASE)
    return text


def find_path_leaks(text: str, extra_tokens=()) -> list[str]:
    """Absolute or home-relative paths (POSIX, Windows, UNC, file://), this machine's directories (home, cwd, temp,
    repository), and the current user / host name (as whole words, case-insensitive; generic names such as `root` are
    skipped, their home folders are still absolute paths) found in `text`. Returns one description per distinct
    finding; [] when clean."""
    found: list[str] = []

    def add(msg: str) -> None:
        if msg not in found:
            found.append(msg)

    for _start, _end, msg in _path_spans(text):
        add(msg)
    for d in _local_dirs():
        if d in text and re.search(r"(?<![\w.-])%s(?![\w.-])" % re.escape(d), text):
            add(f"local directory {d!r}")
    tokens = [t for t in [*_identity_tokens(), *extra_tokens] if t]
    if tokens:
        lowered = text.lower()
        for tok in tokens:
            if tok.lower() in lowered and re.search(
                r"(?<![A-Za-z0-9])%s(?![A-Za-z0-9])" % re.escape(tok), text, flags=re.IGNORECASE
            ):
                add(f"user/host name {tok!r}")
    return found
