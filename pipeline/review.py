"""The human check before release: one self-contained HTML page per (source, family) with a seeded sample of eval
items, each showing exactly the images and the prompt a model gets, for a person to answer.

    processbench review --release DIR --images DIR --out DIR [--per-cell 100] [--seed N]

- Items: every eval file of the release (L1 and the out-of-distribution levels), sampled per (source, family) with a
  seeded shuffle (pipeline.core.seeding, stage "review"): at most `per_cell` items, the same sample for the same release.
- Images: the files `processbench reconstruct` wrote (`<images>/<item_id>_<k>.png`, k = 0, 1, ...); the sampled
  items' images are copied next to the pages (`images/`), referenced relatively, so the folder opens from disk
  (file://) with no server. An item whose images are missing is left out and listed in `index.html`.
- Prompt: pipeline.release.prompts.format_prompt, the text every model and export gets.
- The page: buttons for each option letter and "cannot tell"; keys A-F (or 1-6) answer, 0 or ? cannot tell,
  arrows / J K move; the answers are kept in the browser (localStorage, per page) and exported with "Export
  verdicts" as a JSON file (format VERDICTS_FORMAT) that `processbench validity --human FILE ...` merges. The page
  never holds the answer key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import html
import json
import shutil
from collections import defaultdict
from pathlib import Path

from pipeline.release.prompts import format_prompt
from pipeline.release.schema import CHOICE_LETTERS
from pipeline.core.seeding import py_rng

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

VERDICTS_FORMAT = "processbench-review-verdicts"
VERDICTS_VERSION = 1
PAGE_COLUMNS = (
    "item_id",
    "source_slug",
    "task_id",
    "eval_level",
    "question",
    "num_choices",
    *[f"choice_{c}" for c in CHOICE_LETTERS],
)


def eval_rows(release: Path, cfg: Settings) -> list[dict]:
    """Every eval row of the release (the L1 file and each level's file), in file order."""
    import polars as pl

    from pipeline.release.files import file_names, level_file_names

    names = file_names(cfg)
    paths = [release / names["eval_parquet"]]
    for level in ("L2", "L3"):  # the out-of-distribution levels' files, where the release has them
        paths.append(release / level_file_names(cfg, level)["parquet"])
    rows: list[dict] = []
    for p in paths:
        if p.exists():
            df = pl.read_parquet(p)
            rows += df.select([c for c in PAGE_COLUMNS if c in df.columns]).to_dicts()
    if not rows:
        raise FileNotFoundError(f"{release}: no eval file ({names['eval_parquet']}) to review")
    return rows


def sample_cells(rows: list[dict], per_cell: int, seed: int) -> dict[tuple[str, str], list[dict]]:
    """(source, family) -> at most per_cell rows, a seeded shuffle of the cell's rows sorted by item id."""
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        cells[(r["source_slug"], r["task_id"])].append(r)
    out = {}
    for key in sorted(cells, key=lambda k: (k[0], int(k[1][1:]) if k[1][1:].isdigit() else 999)):
        rs = sorted(cells[key], key=lambda r: r["item_id"])
        py_rng(seed, "review", *key).shuffle(rs)
        out[key] = rs[:per_cell]
    return out


def item_images(images: Path, item_id: str) -> list[str]:
    """The item's image file names, k = 0, 1, ... while they exist."""
    from pipeline.release.files import image_filename

    out, k = [], 0
    while (images / image_filename(item_id, k)).exists():
        out.append(image_filename(item_id, k))
        k += 1
    return out


def _page(cell: tuple[str, str], items: list[dict], release_id: str) -> str:
    data = {
        "format": VERDICTS_FORMAT,
        "version": VERDICTS_VERSION,
        "release": release_id,
        "source": cell[0],
        "family": cell[1],
        "items": items,
    }
    blob = json.dumps(data, ensure_ascii=False, sort_keys=True).replace("</", "<\\/")
    title = html.escape(f"ProcessBench review: {cell[0]} {cell[1]}")
    return _TEMPLATE.replace("__TITLE__", title).replace("__DATA__", blob)


def build_review(
    release: Path, images: Path, out: Path, cfg: Settings, per_cell: int = 100, seed: int | None = None
) -> dict:
    """Write out/index.html, one page per (source, family) and out/images/; returns a summary."""
    release, images, out = Path(release), Path(images), Path(out)
    seed = int(cfg.build.release_seed if seed is None else seed)
    rows = eval_rows(release, cfg)
    release_id = str(cfg.release.release_version)
    (out / "images").mkdir(parents=True, exist_ok=True)
    pages, missing = [], []
    for cell, rs in sample_cells(rows, per_cell, seed).items():
        items = []
        for r in rs:
            files = item_images(images, r["item_id"])
            if not files:
                missing.append(r["item_id"])
                continue
            for f in files:
                shutil.copyfile(images / f, out / "images" / f)
            k = int(r["num_choices"])
            items.append(
                {
                    "item_id": r["item_id"],
                    "level": r.get("eval_level"),
                    "prompt": format_prompt(r, cfg),
                    "letters": list(CHOICE_LETTERS[:k]),
                    "images": [f"images/{f}" for f in files],
                }
            )
        if not items:
            continue
        name = f"review_{cell[0]}_{cell[1]}.html"
        (out / name).write_text(_page(cell, items, release_id), encoding="utf-8")
        pages.append({"page": name, "source": cell[0], "family": cell[1], "items": len(items)})
    index = [
        "<!doctype html><meta charset='utf-8'><title>ProcessBench review</title>",
        "<h1>ProcessBench review</h1><p>One page per source and family. Answer from the images and the prompt "
        "alone; export each page's verdicts and hand the files to <code>processbench validity --human</code>.</p>",
        "<ul>",
    ]
    index += [
        f"<li><a href='{p['page']}'>{html.escape(p['source'])} {html.escape(p['family'])}</a> ({p['items']} items)</li>"
        for p in pages
    ]
    index.append("</ul>")
    if missing:
        index.append(
            f"<p>{len(missing)} sampled items left out: no reconstructed images "
            f"(first: {html.escape(', '.join(missing[:10]))}).</p>"
        )
    (out / "index.html").write_text("\n".join(index) + "\n", encoding="utf-8")
    return {"pages": pages, "missing_images": missing}


def command(args) -> int:
    from pipeline.frames.reconstruct import images_folder
    from pipeline.settings.config import load_settings

    cfg = load_settings()
    images = images_folder(Path(args.images), cfg)  # `reconstruct --out`'s folder or its images/ folder
    summary = build_review(
        Path(args.release),
        images,
        Path(args.out),
        cfg,
        per_cell=int(args.per_cell),
        seed=args.seed,
    )
    for p in summary["pages"]:
        print(f"{Path(args.out) / p['page']}: {p['items']} items")
    if summary["missing_images"]:
        print(f"{len(summary['missing_images'])} sampled items have no images in {images} (left out)")
    return 0 if summary["pages"] else 1


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:sans-serif;margin:1em;max-width:1400px}
#imgs img{max-width:100%;max-height:420px;margin:2px;border:1px solid #999}
pre{white-space:pre-wrap;background:#f4f4f4;padding:.6em}
button{font-size:1.1em;margin:.2em;padding:.4em .9em}
button.chosen{background:#2a6;color:#fff}
#bar{display:flex;gap:1em;align-items:center;flex-wrap:wrap}
</style></head>
<body>
<h1>__TITLE__</h1>
<div id="bar"><span id="pos"></span><code id="item"></code><span id="done"></span>
<label>Annotator <input id="annotator" size="12"></label>
<button id="prev">&larr; previous</button><button id="next">next &rarr;</button>
<button id="export">Export verdicts</button></div>
<p>Keys: A&ndash;F or 1&ndash;6 answer, 0 or ? cannot tell, &larr; / &rarr; (or K / J) move.</p>
<div id="imgs"></div>
<pre id="prompt"></pre>
<div id="answers"></div>
<script id="data" type="application/json">__DATA__</script>
<script>
const D = JSON.parse(document.getElementById('data').textContent);
const KEY = 'processbench-review|' + D.release + '|' + D.source + '|' + D.family;
let S = JSON.parse(localStorage.getItem(KEY) || '{"i":0,"verdicts":{},"annotator":""}');
const save = () => localStorage.setItem(KEY, JSON.stringify(S));
const ann = document.getElementById('annotator');
ann.value = S.annotator || '';
ann.addEventListener('input', () => { S.annotator = ann.value; save(); });
function show() {
  const it = D.items[S.i];
  document.getElementById('pos').textContent = 'Item ' + (S.i + 1) + ' / ' + D.items.length;
  document.getElementById('item').textContent = it.item_id;
  document.getElementById('done').textContent = Object.keys(S.verdicts).length + ' answered';
  const im = document.getElementById('imgs'); im.innerHTML = '';
  for (const src of it.images) { const e = document.createElement('img'); e.src = src; e.alt = src; im.appendChild(e); }
  document.getElementById('prompt').textContent = it.prompt;
  const a = document.getElementById('answers'); a.innerHTML = '';
  const v = S.verdicts[it.item_id];
  for (const L of it.letters.concat(['cannot tell'])) {
    const b = document.createElement('button');
    b.textContent = L; b.dataset.answer = L;
    if (v && ((L === 'cannot tell' && v.cannot_tell) || v.answer === L)) b.className = 'chosen';
    b.addEventListener('click', () => answer(L));
    a.appendChild(b);
  }
}
function answer(L) {
  const it = D.items[S.i];
  S.verdicts[it.item_id] = L === 'cannot tell' ? {answer: null, cannot_tell: true} : {answer: L, cannot_tell: false};
  if (S.i < D.items.length - 1) S.i += 1;
  save(); show();
}
function move(d) { S.i = Math.max(0, Math.min(D.items.length - 1, S.i + d)); save(); show(); }
document.getElementById('prev').addEventListener('click', () => move(-1));
document.getElementById('next').addEventListener('click', () => move(1));
document.addEventListener('keydown', (e) => {
  if (e.target === ann) return;
  const it = D.items[S.i], k = e.key;
  if (k === 'ArrowRight' || k === 'j' || k === 'J') return move(1);
  if (k === 'ArrowLeft' || k === 'k' || k === 'K') return move(-1);
  if (k === '0' || k === '?') return answer('cannot tell');
  const n = '123456'.indexOf(k);
  const L = n >= 0 ? it.letters[n] : k.toUpperCase();
  if (L && it.letters.includes(L)) answer(L);
});
function exportVerdicts() {
  const out = {format: D.format, version: D.version, release: D.release, source: D.source, family: D.family,
    annotator: S.annotator || 'anonymous',
    verdicts: D.items.filter(it => S.verdicts[it.item_id]).map(it => Object.assign({item_id: it.item_id},
                                                                                  S.verdicts[it.item_id]))};
  const blob = new Blob([JSON.stringify(out, null, 1)], {type: 'application/json'});
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = 'verdicts_' + D.source + '_' + D.family + '_' + (S.annotator || 'anonymous') + '.json';
  document.body.appendChild(a); a.click(); a.remove();
}
document.getElementById('export').addEventListener('click', exportVerdicts);
show();
</script>
</body></html>
"""
