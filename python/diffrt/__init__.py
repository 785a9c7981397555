"""diffrt: run DIFF Transformer models from Python.

A thin ctypes layer over libdiffrt.so (the C API in include/diffrt/).
``pip install`` of a checkout puts the library, its backend modules and the
CLI inside the package (``python -m diffrt run ...`` is ``diffrt run ...``);
from a source build, set DIFFRT_LIBRARY to the library's path. numpy is
required.

    import diffrt
    with diffrt.Model("models/diff-v1-tiny") as m:
        g = m.generate("The cold doctor", n=16)
        print(g.text)
"""

from ._lib import (
    DRT_MAX_CTX,
    ArgumentOverflow,
    Busy,
    Closed,
    Error,
    InvalidArgument,
    LibraryNotFound,
    Status,
    cli_path,
    library_path,
)
from .model import (
    BackendInfo,
    BatchSession,
    Device,
    Generation,
    Model,
    ModelInfo,
    NodeEvent,
    NodeTensor,
    Sampler,
    Session,
    backends,
    git_commit,
    version,
)
from .tokenizer import StreamDecoder, Tokenizer

__all__ = [
    "DRT_MAX_CTX",
    "ArgumentOverflow",
    "BackendInfo",
    "BatchSession",
    "Busy",
    "Closed",
    "Device",
    "Error",
    "Generation",
    "InvalidArgument",
    "LibraryNotFound",
    "Model",
    "ModelInfo",
    "NodeEvent",
    "NodeTensor",
    "Sampler",
    "Session",
    "Status",
    "StreamDecoder",
    "Tokenizer",
    "backends",
    "cli_path",
    "git_commit",
    "library_path",
    "version",
]

# the settings table and the values in force (settings.py)
from .settings import SettingInfo, SettingValue, setting, settings_in_force, settings_table  # noqa: E402

__all__ += ["SettingInfo", "SettingValue", "setting", "settings_in_force", "settings_table"]

# quantizing a model and a backend's measured peaks (tools.py)
from .tools import Peak, QuantizeResult, measure_peak, quantize  # noqa: E402

__all__ += ["Peak", "QuantizeResult", "measure_peak", "quantize"]
