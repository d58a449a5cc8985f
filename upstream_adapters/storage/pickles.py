"""Restricted loading of pickled `.npy` files (RH20T stores dicts of arrays that way).

`np.load(allow_pickle=True)` would execute any pickle an archive ships; `load_npy` admits only numpy array and
scalar reconstruction (and the few builtins protocol <= 2 needs), so a hostile file fails instead of running code.
"""

from __future__ import annotations

import io
import pickle

import numpy as np


_NUMPY_ALIASES = {"numpy.core.multiarray": "numpy._core.multiarray", "numpy.core.numeric": "numpy._core.numeric"}
_ALLOWED_GLOBALS = {
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("collections", "OrderedDict"),
    ("_codecs", "encode"),  # how pickle protocol <= 2 stores bytes
}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        module = _NUMPY_ALIASES.get(module, module)
        if (module, name) in _ALLOWED_GLOBALS or (module == "numpy.dtypes" and name.endswith("DType")):
            import importlib

            return getattr(importlib.import_module(module), name)
        raise pickle.UnpicklingError(f"pickled object {module}.{name} is not allowed")


def load_npy(data: bytes):
    """np.load(allow_pickle=True).item() semantics for RH20T files, without executing arbitrary pickles."""
    from numpy.lib import format as npf

    bio = io.BytesIO(data)
    version = npf.read_magic(bio)
    if version == (1, 0):
        shape, fortran, dtype = npf.read_array_header_1_0(bio)
    elif version == (2, 0):
        shape, fortran, dtype = npf.read_array_header_2_0(bio)
    else:
        shape, fortran, dtype = npf._read_array_header(bio, version)  # (3, 0): utf-8 header
    if dtype.hasobject:
        arr = _NumpyOnlyUnpickler(bio).load()
    else:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    if isinstance(arr, np.ndarray) and arr.dtype.hasobject and arr.shape == ():
        return arr.item()
    return arr
