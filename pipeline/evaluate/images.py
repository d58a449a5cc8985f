"""An item's images as the request carries them: read from the folder `processbench reconstruct --out` writes
(images/<item_id>_<k>.png, the references the exports use; that folder or its images/ folder is given), checked pixel for pixel against the release's
image_hashes_json (the hash the build and `reconstruct` use: pipeline/frames/render.py `image_hashes`), optionally
downscaled (--image-max-side: INTER_AREA, the build's size policy, never upscaled), and encoded as PNG data URLs.

`reconstruct_for(...)` fills that folder on the fly from upstream data by calling `processbench reconstruct`'s own
code (pipeline/reconstruct.py) for the run's items only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import base64
from pathlib import Path

from pipeline.frames.pixels import decode_png, encode_png
from pipeline.frames.render import apply_size_policy, image_hashes

from .items import EvalItem

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


class ImageError(Exception):
    """An item's images cannot be sent (missing file, undecodable, pixels differ from the release)."""


def load_item_images(
    item: EvalItem, images_dir: Path, max_side: int | None = None, png_compression: int = 1
) -> list[str]:
    """The item's images as `data:image/png;base64,...` URLs, in the release's order; `images_dir`: the folder of
    the image files (pipeline/reconstruct.py `images_folder`), where each reference's file name lies."""
    urls = []
    for k, rel in enumerate(item.images):
        path = Path(images_dir) / rel.rsplit("/", 1)[-1]
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ImageError(
                f"item {item.item_id}: image {k} missing ({path.name} in {images_dir}; run `processbench "
                f"reconstruct` for its source or pass --upstream)"
            ) from None
        try:
            img = decode_png(data)
        except ValueError as exc:
            raise ImageError(f"item {item.item_id}: image {k} ({rel}) cannot be decoded: {exc}") from None
        if item.image_hashes is not None:
            if len(item.image_hashes) != len(item.images):
                raise ImageError(
                    f"item {item.item_id}: {len(item.images)} images, "
                    f"{len(item.image_hashes)} hashes in the release row"
                )
            if image_hashes([img])[0] != item.image_hashes[k]:
                raise ImageError(
                    f"item {item.item_id}: image {k} ({rel}) differs from the release (pixel sha256): "
                    f"rebuilt from other upstream data or another release"
                )
        if max_side:
            small = apply_size_policy(img, {"max_side": int(max_side)})
            if small.shape != img.shape:
                data = encode_png(small, png_compression)
        urls.append("data:image/png;base64," + base64.b64encode(data).decode("ascii"))
    return urls


def reconstruct_for(
    items: list[EvalItem],
    release_dir: Path,
    upstream: dict[str, Path],
    cfg: Settings,
    out_dir: Path,
    progress=None,
    fingerprint: str | None = None,
) -> tuple[Path, dict]:
    """Reconstruct (and hash-verify) the images of `items` from the upstream folders into `out_dir`, by the code of
    `processbench reconstruct`. Returns (the images folder to read, the reconstruction report). Items of sources not
    given, or whose frames cannot be rebuilt, have no images there: the run records them as failed with the reason."""
    from pipeline.reconstruct import reconstruct

    from pipeline.scoring.circular import base_id

    ids = {base_id(it.item_id) for it in items}  # a CircularEval copy shows its item's images
    sources = sorted({it.source for it in items} & set(upstream))
    report = reconstruct(
        Path(release_dir),
        upstream,
        cfg,
        Path(out_dir),
        sources=sources,
        item_ids=ids,
        progress=progress,
        fingerprint=fingerprint,
    )
    return Path(out_dir) / cfg.frames.reconstruction.images_dir, report  # where `reconstruct` writes them
