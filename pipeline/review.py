"""The human check before release: self-contained HTML pages with a seeded sample of eval items, each showing exactly
the images a model gets, for a person to judge.

    processbench review --release DIR --images DIR --out DIR [--per-cell 100] [--seed N] [--prefill FILE ...]

- Pages: one per (source, family) of the multiple-choice items (the prompt a model gets,
  pipeline.release.prompts.format_prompt, and its images; a button per option letter and "cannot tell"), and one per
  source of the step track (T13: the goal, then each step's sentence beside its frames; a verdict per step: right,
  wrong or unsure, i.e. whether the sentence is true of its frames). A page never holds the answer key or a step's
  label.
- Items: every eval file of the release (L1 and the out-of-distribution levels; the step track's eval files through
  pipeline/steps/tables.py), at most `per_cell` per page: the items ranked by a seeded hash of their `item_uid`
  (pipeline.core.seeding.stable_hash, stage "review"), so the sample of an item does not depend on the others and a
  rebuilt release samples its unchanged items as the last one did.
- Images: the files `processbench reconstruct` wrote (`<images>/<item_id>_<k>.png`, k = 0, 1, ...); the sampled
  items' images are copied next to the pages (`images/`), referenced relatively, so the folder opens from disk
  (file://) with no server. An item whose images are missing is left out and listed in `index.html`.
- Identity: every page records the release fingerprint (pipeline.release.identity) and each item's uid. The page keeps
  its verdicts in the browser (localStorage) under the release fingerprint, the page and the annotator's name: no
  verdict is given before a name is entered, two annotators in one browser each keep their own, and the pages of
  another release (a rebuild) never show these answers.
- Export: "Export verdicts" downloads a JSON file (VERDICTS_FORMAT, below) that `processbench validity --human FILE
  ...` merges by item uid (pipeline/validity/human.py).
- Carry-over: `--prefill FILE ...` (verdict files of an earlier build) pre-fills each annotator's verdicts on exactly
  the items whose uid is on the new pages (unchanged items); the rest are counted: items not in this release
  (changed or removed), items not sampled.

Verdict file (version 2): {format, version, release (version, for a reader), release_fingerprint, track ("mcq" or
"steps"), source, family, annotator, verdicts: [...]}, a verdict {item_uid, item_id, answer: letter | null,
cannot_tell} on a multiple-choice page, {item_uid, item_id, step (0-based), verdict: right | wrong | unsure} per step
on a step page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import html
import json
import shutil
from collections import defaultdict
from pathlib import Path

from pipeline.core.seeding import stable_hash
from pipeline.release.prompts import format_prompt
from pipeline.release.schema import CHOICE_LETTERS
from pipeline.validity.human import (
    VERDICTS_FORMAT,
    VERDICTS_VERSION,
)  # the file format lives with its reader

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

ITEM_COLUMNS = ("item_id", "item_uid", "source_slug", "task_id", "eval_level", "question")
MCQ_COLUMNS = (*ITEM_COLUMNS, "num_choices", *[f"choice_{c}" for c in CHOICE_LETTERS])
STEP_COLUMNS = (*ITEM_COLUMNS, "response", "step_image_index_json")


def eval_rows(release: Path, cfg: Settings) -> list[dict]:
    """Every multiple-choice eval row of the release (each eval level's file), in file order, with track "mcq"."""
    import polars as pl

    from pipeline.release.files import eval_level_files

    rows: list[dict] = []
    for rel in eval_level_files(release, cfg).values():
        p = release / rel
        if p.exists():
            df = pl.read_parquet(p)
            rows += [{**r, "track": "mcq"} for r in df.select([c for c in MCQ_COLUMNS if c in df.columns]).to_dicts()]
    return rows


def step_eval_rows(release: Path, cfg: Settings) -> list[dict]:
    """Every eval item of the step track (all levels), track "steps": its sentences and per step its image indices;
    never its labels. Empty without step files."""
    from .steps.tables import read_step_tables

    tables = read_step_tables(release, cfg, columns=STEP_COLUMNS)
    if tables is None:
        return []
    out = []
    for r in tables["eval"].iter_rows(named=True):
        steps = list(r.pop("response")["steps"])
        out.append({**r, "track": "steps", "steps": steps, "image_index": json.loads(r["step_image_index_json"])})
    return out


def _family_order(cell: tuple[str, str]) -> tuple:
    return (cell[0], int(cell[1][1:]) if cell[1][1:].isdigit() else 999, cell[1])


def sample_cells(rows: list[dict], per_cell: int, seed: int) -> dict[tuple[str, str], list[dict]]:
    """(source, family) -> at most per_cell rows: the cell's rows ranked by a seeded hash of their item uid."""
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        cells[(r["source_slug"], r["task_id"])].append(r)
    out = {}
    for key in sorted(cells, key=_family_order):
        rank = sorted(cells[key], key=lambda r: (stable_hash(seed, "review", *key, r["item_uid"]), r["item_uid"]))
        out[key] = rank[:per_cell]
    return out


def item_images(images: Path, item_id: str) -> list[str]:
    """The item's image file names, k = 0, 1, ... while they exist."""
    from pipeline.release.files import image_filename

    out, k = [], 0
    while (images / image_filename(item_id, k)).exists():
        out.append(image_filename(item_id, k))
        k += 1
    return out


def _page_item(r: dict, files: list[str], cfg: Settings) -> dict | None:
    """What the page shows of one item (None when its images are not all there)."""
    src = [f"images/{f}" for f in files]
    head = {"item_uid": r["item_uid"], "item_id": r["item_id"], "level": r.get("eval_level")}
    if r["track"] == "steps":
        if any(i >= len(src) for ix in r["image_index"] for i in ix):
            return None
        steps = [{"sentence": s, "images": [src[i] for i in ix]} for s, ix in zip(r["steps"], r["image_index"])]
        return {**head, "goal": r["question"], "steps": steps}
    k = int(r["num_choices"])
    return {**head, "prompt": format_prompt(r, cfg), "letters": list(CHOICE_LETTERS[:k]), "images": src}


def _prefill(files: list, rows: list[dict], pages: dict, tracks: dict) -> tuple[dict, list[dict]]:
    """Verdicts of earlier files (pipeline/validity/human.py VerdictFile) on exactly the items of these pages (same
    track and uid): ({(track, uid): {annotator: the page's stored verdict}}, one record per file: verdicts, carried
    over, on items not in this release, on items not on a page). ValueError naming the file for a verdict that cannot
    be one on its item (a step or a letter the item does not have)."""
    from pipeline.validity.human import verdict_problem

    on_page = {(tracks[cell], it["item_uid"]): it for cell, items in pages.items() for it in items}
    in_release = {(r["track"], r["item_uid"]) for r in rows}
    seeds: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)
    records = []
    for f in files:
        carried = absent = unsampled = 0
        for v in f.verdicts:
            key = (f.track, v.item_uid)
            it = on_page.get(key)
            if key not in in_release:
                absent += 1
            elif it is None:
                unsampled += 1
            elif why := verdict_problem(v, len(it["steps"] if f.track == "steps" else it["letters"])):
                raise ValueError(f"{f.name}: {why}")
            else:
                if f.track == "steps":
                    seeds[key].setdefault(f.annotator, {})[str(v.step)] = v.verdict
                else:
                    seeds[key][f.annotator] = {"answer": v.answer, "cannot_tell": v.cannot_tell}
                carried += 1
        records.append(
            {
                "file": f.name,
                "annotator": f.annotator,
                "verdicts": len(f.verdicts),
                "carried": carried,
                "not_in_release": absent,
                "not_sampled": unsampled,
            }
        )
    return seeds, records


def _page(cell: tuple[str, str], track: str, items: list[dict], ident: dict, prefill: dict) -> str:
    data = {
        "format": VERDICTS_FORMAT,
        "version": VERDICTS_VERSION,
        **ident,
        "track": track,
        "source": cell[0],
        "family": cell[1],
        "items": items,
        "prefill": prefill,
    }
    blob = json.dumps(data, ensure_ascii=False, sort_keys=True).replace("</", "<\\/")
    title = html.escape(f"ProcessBench review: {cell[0]} {cell[1]}")
    return _TEMPLATE.replace("__TITLE__", title).replace("__DATA__", blob)


def build_review(
    release: Path,
    images: Path,
    out: Path,
    cfg: Settings,
    per_cell: int = 100,
    seed: int | None = None,
    prefill: list[Path] = (),
) -> dict:
    """Write out/index.html, one page per (source, family) (per source for the step track) and out/images/; returns
    {"release_fingerprint", "pages": [{page, source, family, track, items}], "missing_images": [item_id],
    "prefill": [per file record]}. A bad release or prefill file raises ValueError naming it (one line)."""
    from pipeline.release.identity import release_fingerprint
    from pipeline.validity.human import load_verdicts

    release, images, out = Path(release), Path(images), Path(out)
    seed = int(cfg.build.release_seed if seed is None else seed)
    ident = {"release": str(cfg.release.release_version), "release_fingerprint": release_fingerprint(release, cfg)}
    earlier = load_verdicts(list(prefill))  # read whole before any page is written
    rows = eval_rows(release, cfg) + step_eval_rows(release, cfg)
    if not rows:
        raise FileNotFoundError(f"{release}: no eval items to review")
    missing: list[str] = []
    pages: dict[tuple[str, str], list[dict]] = {}
    tracks: dict[tuple[str, str], str] = {}
    copies: list[str] = []
    for cell, rs in sample_cells(rows, per_cell, seed).items():
        items = []
        for r in rs:
            files = item_images(images, r["item_id"])
            it = _page_item(r, files, cfg) if files else None
            if it is None:
                missing.append(r["item_id"])
                continue
            items.append(it)
            copies += files
        if items:
            pages[cell], tracks[cell] = items, rs[0]["track"]
    seeds, records = _prefill(earlier, rows, pages, tracks)
    (out / "images").mkdir(parents=True, exist_ok=True)
    for f in copies:
        shutil.copyfile(images / f, out / "images" / f)
    written = []
    for cell, items in pages.items():
        pre: dict[str, dict] = defaultdict(dict)
        for it in items:
            for who, v in seeds.get((tracks[cell], it["item_uid"]), {}).items():
                pre[who][it["item_uid"]] = v
        name = f"review_{cell[0]}_{cell[1]}.html"
        (out / name).write_text(_page(cell, tracks[cell], items, ident, dict(sorted(pre.items()))), encoding="utf-8")
        written.append({"page": name, "source": cell[0], "family": cell[1], "track": tracks[cell], "items": len(items)})
    _index(out, written, missing, ident)
    return {
        "release_fingerprint": ident["release_fingerprint"],
        "pages": written,
        "missing_images": missing,
        "prefill": records,
    }


def _index(out: Path, pages: list[dict], missing: list[str], ident: dict) -> None:
    lines = [
        "<!doctype html><meta charset='utf-8'><title>ProcessBench review</title>",
        "<h1>ProcessBench review</h1>",
        f"<p>Release {html.escape(ident['release'])}, fingerprint <code>{html.escape(ident['release_fingerprint'])}"
        "</code>.</p><p>One page per source and family (per source for the step track). Enter your name on each "
        "page, judge from the images alone, export each page's verdicts and hand the files to "
        "<code>processbench validity --human</code>.</p>",
        "<ul>",
    ]
    lines += [
        f"<li><a href='{p['page']}'>{html.escape(p['source'])} {html.escape(p['family'])}</a> ({p['items']} items"
        f"{', steps' if p['track'] == 'steps' else ''})</li>"
        for p in pages
    ]
    lines.append("</ul>")
    if missing:
        lines.append(
            f"<p>{len(missing)} sampled items left out: no reconstructed images "
            f"(first: {html.escape(', '.join(missing[:10]))}).</p>"
        )
    (out / "index.html").write_text("\n".join(lines) + "\n", encoding="utf-8")


def command(args) -> int:
    from pipeline.reconstruct import images_folder
    from pipeline.settings.config import load_settings

    cfg = load_settings()
    try:
        images = images_folder(Path(args.images), cfg)  # `reconstruct --out`'s folder or its images/ folder
        summary = build_review(
            Path(args.release),
            images,
            Path(args.out),
            cfg,
            per_cell=int(args.per_cell),
            seed=args.seed,
            prefill=[Path(f) for f in args.prefill or ()],
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"processbench review: {exc}")
        return 2
    for p in summary["pages"]:
        print(f"{Path(args.out) / p['page']}: {p['items']} items")
    if summary["missing_images"]:
        print(f"{len(summary['missing_images'])} sampled items have no images in {images} (left out)")
    for r in summary["prefill"]:
        print(
            f"prefill {r['file']} ({r['annotator']}): {r['carried']} of {r['verdicts']} verdicts carried over "
            f"(same item); {r['not_in_release']} on items not in this release, {r['not_sampled']} on items not "
            "on these pages"
        )
    return 0 if summary["pages"] else 1


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:sans-serif;margin:1em;max-width:1400px}
#imgs img{max-width:100%;max-height:420px;margin:2px;border:1px solid #999}
.frames img{max-width:48%;max-height:260px;margin:2px;border:1px solid #999}
pre{white-space:pre-wrap;background:#f4f4f4;padding:.6em}
button{font-size:1.1em;margin:.2em;padding:.4em .9em}
button.chosen{background:#2a6;color:#fff}
button:disabled{opacity:.4}
#bar{display:flex;gap:1em;align-items:center;flex-wrap:wrap}
#msg{color:#a00;font-weight:bold}
.step{display:flex;gap:1em;align-items:center;border-top:1px solid #ccc;padding:.4em}
.step.current{background:#fff3c4}
.step .frames{flex:0 0 55%}
.step .sentence{flex:1;font-size:1.15em}
</style></head>
<body>
<h1>__TITLE__</h1>
<p>Release <span id="release"></span>, fingerprint <code id="fingerprint"></code></p>
<div id="bar"><span id="pos"></span><code id="item"></code><span id="done"></span>
<label>Annotator <input id="annotator" size="14"></label>
<button id="prev">&larr; previous</button><button id="next">next &rarr;</button>
<button id="export">Export verdicts</button></div>
<p id="msg"></p>
<p id="keys"></p>
<div id="view"></div>
<script id="data" type="application/json">__DATA__</script>
<script>
const D = JSON.parse(document.getElementById('data').textContent);
const STEPS = D.track === 'steps';
const VERDICTS = ['right', 'wrong', 'unsure'];
// verdicts are kept per release fingerprint, page and annotator: a rebuilt release's pages start empty, and two
// annotators in one browser never see or overwrite each other's verdicts
const BASE = 'processbench-review|' + D.release_fingerprint + '|' + D.source + '|' + D.family;
const ann = document.getElementById('annotator');
let who = (localStorage.getItem(BASE + '|annotator') || '').trim();
let S = null;
function load() {
  // this annotator's verdicts in this browser, and where they have none on an item, their pre-filled verdict
  const saved = who ? localStorage.getItem(BASE + '|by|' + who) : null;
  const seed = who ? JSON.parse(JSON.stringify((D.prefill || {})[who] || {})) : {};
  S = saved ? JSON.parse(saved) : {i: 0, k: 0, verdicts: {}};
  S.verdicts = Object.assign(seed, S.verdicts);
}
function save() { if (who) localStorage.setItem(BASE + '|by|' + who, JSON.stringify(S)); }
function commitName() {
  const v = ann.value.trim();
  if (v === who) return;
  who = v;
  localStorage.setItem(BASE + '|annotator', who);
  load(); show();
}
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function images(box, list) {
  for (const src of list) box.appendChild(el('img', {src: src, alt: src}));
}
function judged() {
  if (!STEPS) return Object.keys(S.verdicts).length + ' answered';
  let n = 0;
  for (const u in S.verdicts) n += Object.keys(S.verdicts[u]).length;
  return n + ' steps judged';
}
function show() {
  const it = D.items[S.i];
  document.getElementById('pos').textContent = 'Item ' + (S.i + 1) + ' / ' + D.items.length;
  document.getElementById('item').textContent = it.item_id;
  document.getElementById('done').textContent = judged();
  document.getElementById('msg').textContent = who ? '' : 'Enter your name (Annotator) to give verdicts.';
  const view = document.getElementById('view');
  view.innerHTML = '';
  (STEPS ? showSteps : showChoices)(view, it);
}
function showChoices(view, it) {
  const im = el('div', {id: 'imgs'});
  images(im, it.images);
  const a = el('div', {id: 'answers'});
  view.append(im, el('pre', {id: 'prompt'}, it.prompt), a);
  const v = S.verdicts[it.item_uid];
  for (const L of it.letters.concat(['cannot tell'])) {
    const b = el('button', {'data-answer': L}, L);
    if (v && ((L === 'cannot tell' && v.cannot_tell) || v.answer === L)) b.className = 'chosen';
    b.disabled = !who;
    b.addEventListener('click', () => answer(L));
    a.appendChild(b);
  }
}
function showSteps(view, it) {
  view.appendChild(el('p', {id: 'goal'}, 'Goal: ' + it.goal));
  const v = S.verdicts[it.item_uid] || {};
  it.steps.forEach((st, k) => {
    const row = el('div', {'class': 'step' + (k === S.k ? ' current' : ''), 'data-step': k});
    const fr = el('div', {'class': 'frames'});
    images(fr, st.images);
    const bs = el('div', {'class': 'verdicts'});
    for (const V of VERDICTS) {
      const b = el('button', {'data-verdict': V}, V);
      if (v[k] === V) b.className = 'chosen';
      b.disabled = !who;
      b.addEventListener('click', () => judge(k, V));
      bs.appendChild(b);
    }
    row.append(fr, el('div', {'class': 'sentence'}, 'Step ' + (k + 1) + ': ' + st.sentence), bs);
    view.appendChild(row);
    if (k === S.k) requestAnimationFrame(() => row.scrollIntoView({block: 'nearest'}));
  });
}
function answer(L) {
  commitName();
  if (!who) return show();
  const it = D.items[S.i];
  S.verdicts[it.item_uid] = L === 'cannot tell' ? {answer: null, cannot_tell: true} : {answer: L, cannot_tell: false};
  if (S.i < D.items.length - 1) S.i += 1;
  save(); show();
}
function judge(k, V) {
  commitName();
  if (!who) return show();
  const it = D.items[S.i];
  (S.verdicts[it.item_uid] = S.verdicts[it.item_uid] || {})[k] = V;
  if (k + 1 < it.steps.length) S.k = k + 1;
  else if (S.i < D.items.length - 1) { S.i += 1; S.k = 0; }
  save(); show();
}
function move(d) { S.i = Math.max(0, Math.min(D.items.length - 1, S.i + d)); S.k = 0; save(); show(); }
function moveStep(d) { S.k = Math.max(0, Math.min(D.items[S.i].steps.length - 1, S.k + d)); save(); show(); }
document.getElementById('prev').addEventListener('click', () => move(-1));
document.getElementById('next').addEventListener('click', () => move(1));
document.addEventListener('keydown', (e) => {
  if (e.target === ann) return;
  const it = D.items[S.i], k = e.key;
  if (k === 'ArrowRight' || k === 'j' || k === 'J') return move(1);
  if (k === 'ArrowLeft' || k === 'k' || k === 'K') return move(-1);
  if (STEPS) {
    if (k === 'ArrowDown') return moveStep(1);
    if (k === 'ArrowUp') return moveStep(-1);
    const V = {'1': 'right', r: 'right', R: 'right', '+': 'right', '2': 'wrong', w: 'wrong', W: 'wrong',
               '-': 'wrong', '0': 'unsure', u: 'unsure', U: 'unsure', '?': 'unsure'}[k];
    if (V) judge(S.k, V);
    return;
  }
  if (k === '0' || k === '?') return answer('cannot tell');
  const n = '123456'.indexOf(k);
  const L = n >= 0 ? it.letters[n] : k.toUpperCase();
  if (L && it.letters.includes(L)) answer(L);
});
function exportVerdicts() {
  commitName();
  if (!who) { document.getElementById('msg').textContent = 'Enter your name (Annotator) before exporting.'; return; }
  const rows = [];
  for (const it of D.items) {
    const v = S.verdicts[it.item_uid];
    if (!v) continue;
    if (!STEPS) { rows.push(Object.assign({item_uid: it.item_uid, item_id: it.item_id}, v)); continue; }
    it.steps.forEach((_, k) => {
      if (v[k]) rows.push({item_uid: it.item_uid, item_id: it.item_id, step: k, verdict: v[k]});
    });
  }
  const out = {format: D.format, version: D.version, release: D.release, release_fingerprint: D.release_fingerprint,
    track: D.track, source: D.source, family: D.family, annotator: who, verdicts: rows};
  const blob = new Blob([JSON.stringify(out, null, 1)], {type: 'application/json'});
  const a = el('a', {download: 'verdicts_' + D.source + '_' + D.family + '_' + who.replace(/[^A-Za-z0-9_.-]+/g, '_')
                     + '.json'});
  a.href = URL.createObjectURL(blob);
  document.body.appendChild(a); a.click(); a.remove();
}
document.getElementById('export').addEventListener('click', exportVerdicts);
ann.value = who;
ann.addEventListener('change', commitName);
document.getElementById('release').textContent = D.release;
document.getElementById('fingerprint').textContent = D.release_fingerprint;
document.getElementById('keys').textContent = STEPS
  ? 'Is each step\\'s sentence true of its frames? Keys: 1 / R right, 2 / W wrong, 0 / U unsure (the marked step); '
    + '\\u2191 / \\u2193 step, \\u2190 / \\u2192 (or K / J) item.'
  : 'Keys: A\\u2013F or 1\\u20136 answer, 0 or ? cannot tell, \\u2190 / \\u2192 (or K / J) move.';
load(); show();
</script>
</body></html>
"""
