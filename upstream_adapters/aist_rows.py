"""AIST-Bimanual row decoding: HDF5 attribute text and zero-padded JPEG rows (with the colour-order convention)."""

from __future__ import annotations

import io
import re
import warnings

import cv2
import numpy as np
from PIL import Image

from .ir import UnitError


def _text(value) -> str | None:
    """An HDF5 attr / scalar dataset value as text (bytes, numpy bytes/str, 0-d or 1-element arrays)."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        if value.size != 1:
            return None
        value = value.reshape(()).item()
    if isinstance(value, (bytes, np.bytes_)):
        value = bytes(value).decode("utf-8", errors="replace")
    return str(value)


def image_pixels(data: bytes) -> int | None:
    """width x height an encoded image declares in its header (PIL reads the header only, decodes nothing); None
    when PIL does not know the format (OpenCV then says whether it decodes)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as img:
                width, height = img.size
    except Image.DecompressionBombError as exc:  # past PIL's own bound: the header's size is in the message
        sizes = [int(x) for x in re.findall(r"\d+", str(exc))]
        return sizes[0] if sizes else Image.MAX_IMAGE_PIXELS * 2 + 1
    except (OSError, ValueError, SyntaxError):
        return None
    return int(width) * int(height)


def _decode_jpeg_row(row: np.ndarray, channel_order: str = "rgb", max_pixels: int | None = None,
                     where: str = "image", file: str | None = None) -> np.ndarray | None:
    """One zero-padded JPEG row -> HxWx3 RGB. channel_order "bgr": the JPEG was encoded from an RGB array handed to
    cv2.imencode (which takes BGR), so a standard decode has red and blue swapped and is swapped back.
    `max_pixels` (input_limits.max_image_pixels): an image whose header declares more is refused before decoding
    (UnitError naming `where` and `file`)."""
    data = bytes(np.asarray(row, dtype=np.uint8).tobytes()).rstrip(b"\x00")
    if not data:
        return None
    pixels = image_pixels(data) if max_pixels is not None else None
    if pixels is not None and pixels > max_pixels:
        raise UnitError(f"{where} declares {pixels} pixels, over input_limits.max_image_pixels ({max_pixels}): "
                        "refused before decoding", file=file)
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None or img.ndim != 3:
        return None
    return img if channel_order == "bgr" else cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

