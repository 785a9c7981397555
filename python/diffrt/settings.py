"""Reading the settings table (docs/environment.md): every backend and session
setting with its variable, values, default, doc and kind, and the value in
force with where it came from, as ``diffrt info`` prints them.

    >>> diffrt.setting("cpu.precision")
    SettingValue(name='cpu.precision', value='f32', source='default')
    >>> diffrt.setting("cpu.threads", settings={"cpu.threads": 2}).source
    'caller'

Setting values is ``settings=`` on :class:`Session` (model.py); the C calls
here are drt_setting_count, drt_setting_describe and drt_settings_get
(include/diffrt/diffrt.h), declared with their only caller.
"""

from collections import namedtuple
from ctypes import POINTER, Structure, byref, c_char_p, c_int, c_size_t, c_void_p, create_string_buffer

from . import _lib
from .model import _Settings


class _SettingInfoC(Structure):  # drt_setting_info
    _fields_ = [
        ("name", c_char_p),
        ("env", c_char_p),
        ("old_env", c_char_p),
        ("values", c_char_p),
        ("def_", c_char_p),
        ("doc", c_char_p),
        ("kind", _lib.c_enum),
        ("env_only", c_int),
    ]


SettingInfo = namedtuple("SettingInfo", "name env old_env values default doc kind env_only")
SettingInfo.__doc__ = """One row of the settings table. ``env``: its variable; ``old_env``: a
deprecated alias that still works, or None; ``values``: what it takes ("0 or 1", "f32, bf16");
``default``: "" when automatic; ``kind``: "user", or "debug" for a debug or A/B knob;
``env_only``: only the variable sets it (settings= refuses it)."""
SettingValue = namedtuple("SettingValue", "name value source")
SettingValue.__doc__ = """The value in force ("" when automatic) and where it came from:
"default", "env" (the variable or its deprecated alias) or "caller" (settings=)."""

_KINDS = ("user", "debug")  # drt_setting_kind
_SOURCES = ("default", "env", "caller")  # drt_setting_source
_declared = False


def _c():
    """The library, with this module's three functions declared."""
    global _declared
    lib = _lib.lib()
    if not _declared:
        lib.drt_setting_count.restype, lib.drt_setting_count.argtypes = c_int, []
        lib.drt_setting_describe.restype = _lib.c_enum
        lib.drt_setting_describe.argtypes = [c_int, POINTER(_SettingInfoC)]
        lib.drt_settings_get.restype = _lib.c_enum
        lib.drt_settings_get.argtypes = [c_void_p, c_char_p, c_char_p, c_size_t, POINTER(_lib.c_enum)]
        _declared = True
    return lib


def settings_table():
    """Every setting, in the library's order, as :class:`SettingInfo`."""
    lib = _c()
    rows = []
    for i in range(lib.drt_setting_count()):
        si = _SettingInfoC()
        _lib.check(lib.drt_setting_describe(i, byref(si)))
        rows.append(SettingInfo(_lib.cstr(si.name), _lib.cstr(si.env), _lib.cstr(si.old_env),
                                _lib.cstr(si.values), _lib.cstr(si.def_), _lib.cstr(si.doc),
                                _KINDS[si.kind], bool(si.env_only)))
    return tuple(rows)


def _get(lib, h, name):
    n = 256
    while True:
        buf, src = create_string_buffer(n), _lib.c_enum()
        st = lib.drt_settings_get(h, name, buf, n, byref(src))
        if st == 0:
            return buf.value.decode("utf-8", "replace"), _SOURCES[src.value]
        if "longer than the buffer" not in _lib.last_error() or n >= 1 << 20:
            raise _lib.error(st)
        n *= 4


def setting(name, settings=None):
    """The value of setting ``name`` in force as :class:`SettingValue`: from
    ``settings`` (a dict, as ``settings=`` takes) when set there, else its
    variable, else the default. An unknown name, or a bad value in the dict
    or the variable, raises Error naming it."""
    b = _lib.cstring(name, "setting name")
    lib = _c()
    with _Settings(settings) as h:
        return SettingValue(name, *_get(lib, h, b))


def settings_in_force(settings=None):
    """Every setting's :class:`SettingValue`, by name, as ``diffrt info``
    shows them (``settings``: as for :func:`setting`)."""
    lib = _c()
    with _Settings(settings) as h:
        return {r.name: SettingValue(r.name, *_get(lib, h, r.name.encode())) for r in settings_table()}
