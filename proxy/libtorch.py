"""The proxy server loads libtorch, and the `torch` package only if something uses it.

tml-renderers' native extension needs libtorch resident in the process: it binds libtorch's
stable C ABI when it is imported, and refuses to load otherwise. Both it and the tinker SDK
also import the `torch` package when they are imported (`tml_renderers.chat`,
`tinker.types.tensor_data`), for what the proxy never does: audio features, training
tensors. Importing the package costs about 2.1 s of a proxy's ~3.7 s start on a 2-core host;
loading the two shared libraries the extension binds costs about 0.35 s.

So `synth proxy serve`, before it imports either library, loads those libraries and
registers a stand-in `torch` module that imports the real package the first time anything
reads one of its attributes: code that does use torch still gets it, only later. The
stand-in is installed only where nothing has imported torch yet.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import sys
import threading
import types
from pathlib import Path
from typing import Any

PACKAGE = "torch"
BOUND_LIBRARIES = ("libc10.so", "libtorch_cpu.so")
"""What tml-renderers binds, in dependency order."""


class _DeferredTorch(types.ModuleType):
    """`torch` until an attribute is read; then the real package, which replaces it in
    `sys.modules` and answers every later read through this object too."""

    _lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def _real(self) -> types.ModuleType:
        with self._lock:
            if sys.modules.get(PACKAGE) is self:
                del sys.modules[PACKAGE]
            return importlib.import_module(PACKAGE)


def defer_torch_package() -> bool:
    """Load libtorch and stand in for the `torch` package; False where torch is already
    imported, or not installed (then there is nothing to defer)."""
    if PACKAGE in sys.modules:
        return False
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        return False
    library_dir = Path(spec.origin).parent / "lib"
    for name in BOUND_LIBRARIES:
        ctypes.CDLL(str(library_dir / name), mode=ctypes.RTLD_GLOBAL)
    stand_in = _DeferredTorch(PACKAGE)
    stand_in.__spec__ = spec
    sys.modules[PACKAGE] = stand_in
    return True
