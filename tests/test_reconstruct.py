"""pipeline/reconstruct.py: build item images + hashes, delete the cache, rebuild them from "upstream" through
an adapter, and check every hash; a corrupted unit is reported as differs, a missing one as missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

import upstream_adapters
from pipeline.settings.config import load_settings
from pipeline.frames.cache import FrameCache
from pipeline.frames.extract import extract_frames, requests_from_items
from pipeline.frames.pixels import decode_png, pixel_sha256
from pipeline.frames.readers import AdapterReaders
from pipeline.reconstruct import (
    ImagesFolderError,
    images_folder,
    reconstruct,
    reconstruct_summary,
    reconstruction_markdown,
)
from pipeline.frames.render import add_image_hashes
from pipeline.core.io import compact_json, write_parquet
from upstream_adapters.media import video
from upstream_adapters.base import file_digest
from upstream_adapters.ir import UnitError
from upstream_adapters.samples.common import encode_video, render_frame

W, H, N = 160, 128, 40
LABEL = {
    "font": "HERSHEY_SIMPLEX",
    "scale": 0.8,
    "thickness": 2,
    "color": [255, 255, 255],
    "background": [0, 0, 0],
    "position": "top_left",
    "margin": 6,
}


class FakeAdapter:
    """A tiny source: <root>/<unit_id>/<camera>.mp4."""

    slug = "fake"
    name = "Fake"
    unit_type = "episode"

    def __init__(self, **options):
        self.options = options

    def fingerprint(self, root, unit_id):  # the adapter contract: part of every frame-cache key
        return "|".join(file_digest(p) for p in sorted((Path(root) / unit_id).glob("*.mp4")))

    def read_frames(self, root, unit_id, camera, indices, decoder="auto", threads=1):
        path = Path(root) / unit_id / f"{camera}.mp4"
        if not path.is_file():
            raise UnitError(f"{camera} video is missing", file=f"{unit_id}/{camera}.mp4")
        try:
            return video.read_frames(path, indices, decoder=decoder, threads=threads)
        except video.DecodeError as exc:
            raise UnitError(str(exc), file=f"{unit_id}/{camera}.mp4") from exc


def _write_unit(root: Path, unit: str, codec: str, shift: int = 0) -> None:
    frames = [render_frame(i + shift, W, H, ((i + shift) / N, 0.4)) for i in range(N)]
    encode_video(frames, 30, codec=codec, gop=20, path=root / unit / "cam.mp4")


def _spec(kind, labels, indices, size=None, gap=None):
    s = {"version": 1, "kind": kind, "labels": labels, "frame_indices": indices, "size": size, "label": LABEL}
    if gap is not None:
        s["gap"] = gap
    return compact_json(s)


@pytest.fixture()
def setup(tmp_path, monkeypatch):
    monkeypatch.setitem(upstream_adapters.ADAPTERS, "fake", f"{__name__}:FakeAdapter")
    upstream = tmp_path / "upstream"
    for unit, codec in [("ep1", "h264"), ("ep2", "hevc"), ("ep3", "h264")]:
        _write_unit(upstream, unit, codec)
    cfg = load_settings()
    cfg = cfg.with_values(
        {
            "sources": {"fake": {"name": "Fake", "unit_type": "episode", "root": upstream, "adapter": {}}},
            "build.sources": ["fake"],
            "frames.workers": 1,
        }
    )
    items = pl.DataFrame(
        {
            "item_id": [
                "pb_v1_eval_000001",
                "pb_v1_eval_000002",
                "pb_v1_sft_000001",
                "pb_v1_sft_000002",
                "pb_v1_sft_000003",
            ],
            "source": ["fake"] * 5,
            "unit_id": ["ep1", "ep1", "ep2", "ep3", "ep3"],
            "camera": ["cam"] * 5,
            "frame_indices": [[3], [2, 30, 11], [19, 21], [5, 6, 7, 8, 9], [33, 4]],
            "render_spec_json": [
                None,
                _spec("labelled_frames", ["X", "Y", "Z"], [2, 30, 11]),
                _spec("panels", ["X", "Y"], [19, 21], [96, 80], 8),
                None,
                None,
            ],
        }
    )
    cache = FrameCache(tmp_path / "cache")
    table = extract_frames(requests_from_items(items), AdapterReaders.from_config(cfg), cache, workers=1)
    assert set(table["status"]) == {"ok"}
    items = add_image_hashes(items, table, cache, cfg.frames.image.model_dump())
    release = tmp_path / "release"
    rows = items.select(
        "item_id",
        pl.lit("fake").alias("source_slug"),
        pl.col("unit_id").alias("source_unit_id"),
        "camera",
        pl.Series("frame_indices_json", [compact_json(v) for v in items["frame_indices"].to_list()]),
        pl.lit(None, pl.String).alias("display_labels_json"),
        "render_spec_json",
        "image_hashes_json",
    )
    files = cfg.release.files.model_dump()
    write_parquet(release / files["eval_parquet"], rows.filter(pl.col("item_id").str.contains("eval")))
    write_parquet(release / files["sft_parquet"], rows.filter(pl.col("item_id").str.contains("sft")))
    shutil.rmtree(tmp_path / "cache")  # reconstruction must not need the build's cache
    return cfg, upstream, release, items


def test_round_trip_all_hashes_match(setup, tmp_path):
    cfg, upstream, release, items = setup
    out = tmp_path / "out"
    report = reconstruct(release, {"fake": upstream}, cfg, out)
    assert report["sources"]["fake"] == {"items": 5, "ok": 5, "missing": 0, "differs": 0, "unverified": 0}
    assert report["problems"] == [] and report["images_written"] == 1 + 3 + 1 + 5 + 2
    for item in items.iter_rows(named=True):  # the written PNGs hold exactly the hashed pixels
        expected = json.loads(item["image_hashes_json"])
        for k, h in enumerate(expected):
            img = decode_png((out / "images" / f"{item['item_id']}_{k}.png").read_bytes())
            assert pixel_sha256(img) == h
    saved = json.loads((out / "reconstruction_report.json").read_text())
    assert saved == report and str(tmp_path) not in (out / "reconstruction_report.json").read_text()


def test_the_images_are_found_from_the_reconstruct_folder_or_its_images_folder(setup, tmp_path):
    """Issue 40: every command that reads the images (eval, review) takes `reconstruct --out`'s folder or its images
    folder, through images_folder; anything else is one line saying what was expected."""
    cfg, upstream, release, _ = setup
    out = tmp_path / "out"
    reconstruct(release, {"fake": upstream}, cfg, out)
    assert images_folder(out, cfg) == out / "images" == images_folder(out / "images", cfg)
    moved = shutil.copytree(out / "images", tmp_path / "frames")  # the images alone, under another name
    assert images_folder(moved, cfg) == moved
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("x")
    (tmp_path / "a_file").write_text("x")
    for bad, what in (("nowhere", "no such folder"), ("plain", "neither holds images/"), ("a_file", "not a folder")):
        with pytest.raises(ImagesFolderError) as exc:
            images_folder(tmp_path / bad, cfg)
        msg = str(exc.value)
        assert "\n" not in msg and what in msg and str(tmp_path / bad) in msg
        assert (
            "expected the folder `processbench reconstruct --out` wrote (with images/ and reconstruction_report.json"
            in msg
        )


def test_corrupted_and_missing_units_are_reported(setup, tmp_path):
    cfg, upstream, release, _ = setup
    _write_unit(upstream, "ep1", "h264", shift=1)  # same layout, different pixels
    (upstream / "ep2" / "cam.mp4").unlink()  # gone
    out = tmp_path / "out"
    report = reconstruct(release, {"fake": upstream}, cfg, out, workers=1)
    assert report["sources"]["fake"] == {"items": 5, "ok": 2, "missing": 1, "differs": 2, "unverified": 0}
    by_id = {p["item_id"]: p for p in report["problems"]}
    assert by_id["pb_v1_eval_000001"]["status"] == "differs" and "differ" in by_id["pb_v1_eval_000001"]["reason"]
    assert by_id["pb_v1_sft_000001"]["status"] == "missing" and "missing" in by_id["pb_v1_sft_000001"]["reason"]
    assert not (out / "images" / "pb_v1_eval_000001_0.png").exists()  # differing images are not written
    assert (out / "images" / "pb_v1_sft_000002_4.png").exists()


def test_sources_without_root_are_missing(setup, tmp_path):
    cfg, upstream, release, _ = setup
    report = reconstruct(release, {}, cfg, tmp_path / "out", sources=["fake"])
    assert report["sources"]["fake"]["missing"] == 5


def test_reconstruction_markdown_is_path_free():
    cfg = load_settings()
    text = reconstruction_markdown(cfg)
    assert "processbench reconstruct --release DIR --upstream gm100=PATH" in text
    for slug in cfg.build.sources:
        assert f"`{slug}`" in text
    assert "sha256" in text and "render_spec_json" in text and "HERSHEY" in text
    assert str(Path.cwd()) not in text and "/work/" not in text and "/tmp/" not in text
    assert reconstruction_markdown(cfg) == text


def test_every_release_file_is_rebuilt_and_reported_per_file(setup, tmp_path, capsys, monkeypatch):
    """An eval level's own file (split_summary.json `eval_levels`) is rebuilt like the main eval and SFT files, and
    `processbench reconstruct` prints per file what it wrote and where the images went."""
    from assets import cli
    from pipeline.core.io import write_json
    from pipeline.release.files import level_file_name

    cfg, upstream, release, _ = setup
    files = cfg.release.files.model_dump()
    l2 = level_file_name(files["eval_parquet"], "L2")
    main = pl.read_parquet(release / files["eval_parquet"])
    write_parquet(release / files["eval_parquet"], main.head(1))  # L1 keeps one item, L2 gets the other
    write_parquet(release / l2, main.tail(1))
    write_json(
        release / files["split_summary"],
        {"eval_levels": {"L1": {"files": {"parquet": files["eval_parquet"]}}, "L2": {"files": {"parquet": l2}}}},
    )
    out = tmp_path / "out"
    report = reconstruct(release, {"fake": upstream}, cfg, out)
    assert report["files"] == {
        files["eval_parquet"]: {"items": 1, "ok": 1, "missing": 0, "differs": 0, "unverified": 0, "images": 1},
        l2: {"items": 1, "ok": 1, "missing": 0, "differs": 0, "unverified": 0, "images": 3},
        files["sft_parquet"]: {"items": 3, "ok": 3, "missing": 0, "differs": 0, "unverified": 0, "images": 8},
    }
    assert (out / "images" / "pb_v1_eval_000002_2.png").exists()  # the L2 item's images

    text = reconstruct_summary(report, out.resolve(), cfg)
    assert f"  {l2}  1 items: 1 ok; 3 images written" in text
    assert f"12 images in {out.resolve() / 'images'}" in text
    fp = "f" * 64  # the release's fingerprint (pipeline/release/identity.py): in the report and the summary
    again = reconstruct(release, {"fake": upstream}, cfg, out, fingerprint=fp)
    assert json.loads((out / cfg.frames.reconstruction.report_file).read_text())["release_fingerprint"] == fp
    assert reconstruct_summary(again, out, cfg).startswith(f"release fingerprint: {fp}\n")
    monkeypatch.setattr("pipeline.release.identity.release_fingerprint", lambda path, cfg: fp)
    monkeypatch.setattr(
        "pipeline.reconstruct.reconstruct",
        lambda *a, **k: (
            (report, k)[0]
            if k.get("progress") is True and k.get("fingerprint") == fp
            else pytest.fail("progress bar not switched on, or the fingerprint not passed")
        ),
    )
    monkeypatch.setitem(upstream_adapters.ADAPTERS, "fake", f"{__name__}:FakeAdapter")
    monkeypatch.setattr(cli, "load_settings", lambda **kw: cfg)
    monkeypatch.setattr(cli, "_upstream", lambda pairs: {"fake": str(upstream)})
    assert (
        cli.main(["reconstruct", "--release", str(release), "--upstream", f"fake={upstream}", "--out", str(out)]) == 0
    )
    assert text in capsys.readouterr().out
