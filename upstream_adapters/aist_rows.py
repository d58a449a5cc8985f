"""AIST-Bimanual row decoding: HDF5 attribute text and zero-padded JPEG rows (with the colour-order convention)."""

from __future__ import annotations

import cv2
import numpy as np


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


def _decode_jpeg_row(row: np.ndarray, channel_order: str = "rgb") -> np.ndarray | None:
    """One zero-padded JPEG row -> HxWx3 RGB. channel_order "bgr": the JPEG was encoded from an RGB array handed to
    cv2.imencode (which takes BGR), so a standard decode has red and blue swapped and is swapped back."""
    data = bytes(np.asarray(row, dtype=np.uint8).tobytes()).rstrip(b"\x00")
    if not data:
        return None
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None or img.ndim != 3:
        return None
    return img if channel_order == "bgr" else cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

