"""Byte-level BPE tokenizers (tokenizer.json) over drt_tokenizer_*."""

import ctypes
import os
from ctypes import POINTER, byref, c_int, c_int32, c_size_t, c_void_p

from . import _lib
from ._ids import as_ids, check_id, check_vocab


def _utf8(b):
    # the library's output is UTF-8 (invalid input bytes become U+FFFD in C)
    return b.decode("utf-8")


class Tokenizer(_lib.Handle):
    """A tokenizer.json loaded by diffrt.

    ``Tokenizer(path)`` takes the file, or a model directory holding
    ``tokenizer.json``. Encoding and decoding match Hugging Face `tokenizers`.
    Read-only once loaded: any number of threads may use one at once;
    close() waits for their calls (its stream decoders' included), and
    every call after it raises Closed.
    """

    _free_fn = "drt_tokenizer_free"

    def __init__(self, path):
        _lib.cpath(path)  # no NUL (os.path.isdir would say False for one)
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        self.path = path
        self._h = None
        h = c_void_p()
        _lib.check(_lib.lib().drt_tokenizer_load(_lib.cpath(path), byref(h)))
        self._h = h
        self._vocab = _lib.lib().drt_tokenizer_vocab_size(h)  # read-only once loaded

    @classmethod
    def from_json(cls, json, name="tokenizer.json"):
        """A tokenizer from the text of a tokenizer.json (str or bytes);
        ``name`` is what error messages call it."""
        if isinstance(json, str):
            json = json.encode("utf-8")
        elif not isinstance(json, (bytes, bytearray)):
            raise TypeError(f"from_json wants str or bytes, not {type(json).__name__}")
        json = bytes(json)  # passed with its length: a NUL inside is the parser's to reject
        cname = _lib.cstring(name, "name")
        self = cls.__new__(cls)
        self.path = None
        self._h = None
        h = c_void_p()
        _lib.check(
            _lib.lib().drt_tokenizer_load_json(json, _lib.size_t(len(json), "len(json)"), cname, byref(h))
        )
        self._h = h
        self._vocab = _lib.lib().drt_tokenizer_vocab_size(h)
        return self

    def __repr__(self):
        state = "closed" if self._closed or not self._h else f"vocab {self._vocab}"
        return f"<diffrt.Tokenizer {self.path or '(from json)'} {state}>"

    # -- queries
    @property
    def vocab_size(self):
        """One more than the largest token id (model vocab and added tokens)."""
        with self._shared() as h:
            return _lib.lib().drt_tokenizer_vocab_size(h)

    def __len__(self):
        return self.vocab_size

    @property
    def bos_id(self):
        """The id the post-processor puts before the text, or None."""
        with self._shared() as h:
            v = _lib.lib().drt_tokenizer_bos_id(h)
        return None if v < 0 else v

    @property
    def eos_id(self):
        """The end-of-text special token (<|end_of_text|>, <|endoftext|>, </s>), or None."""
        with self._shared() as h:
            v = _lib.lib().drt_tokenizer_eos_id(h)
        return None if v < 0 else v

    def id_to_token(self, id):
        """The token's string as stored in tokenizer.json, or None for an id
        in [0, vocab_size) that names no token; an id outside it raises
        InvalidArgument (a ValueError)."""
        id = check_id(_lib.int32(id, "id"), self._vocab)
        with self._shared() as h:
            s = _lib.lib().drt_tokenizer_id_to_token(h, id)  # c_char_p: copied to bytes
        return None if s is None else _utf8(s)

    def token_to_id(self, token):
        """The id of a token string, or None."""
        token = _lib.cstring(token, "token")
        with self._shared() as h:
            v = _lib.lib().drt_tokenizer_token_to_id(h, token)
        return None if v < 0 else v

    def is_special(self, id):
        """True when the id is an added token marked special; an id outside
        [0, vocab_size) raises InvalidArgument (a ValueError)."""
        id = check_id(_lib.int32(id, "id"), self._vocab)
        with self._shared() as h:
            return bool(_lib.lib().drt_tokenizer_is_special(h, id))

    # -- encode / decode
    def encode(self, text, add_special=True, max_tokens=None):
        """Token ids of ``text`` (str, or UTF-8 bytes) as a list of ints; with
        add_special the post-processor's tokens (e.g. BOS) are added. With
        ``max_tokens`` (> 0), a text that makes more ids raises InvalidArgument,
        checked while encoding, so a huge text stops early
        (drt_tokenizer_encode_max)."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        elif not isinstance(text, (bytes, bytearray, memoryview)):
            raise TypeError(f"encode wants str or bytes, not {type(text).__name__}")
        text = bytes(text)
        ids = POINTER(c_int32)()
        n = c_int()
        L = _lib.lib()
        limit = 0 if max_tokens is None else _lib.int32(max_tokens, "max_tokens", lo=1)
        with self._shared() as h:
            _lib.check(L.drt_tokenizer_encode_max(h, text, _lib.size_t(len(text), "len(text)"),
                                                  int(bool(add_special)), limit, byref(ids), byref(n)))
        try:
            return ids[: n.value]
        finally:
            _lib.free(ctypes.cast(ids, c_void_p))

    def decode(self, ids, skip_special=False):
        """The text of ``ids``; skip_special drops special tokens. An id
        outside [0, vocab_size) raises InvalidArgument (a ValueError) naming
        it and its position (Hugging Face skips it silently); one inside that
        names no token is skipped."""
        arr = check_vocab(as_ids(ids), self._vocab)
        text = c_void_p()
        n = c_size_t()
        L = _lib.lib()
        with self._shared() as h:
            _lib.check(L.drt_tokenizer_decode(h, arr.ctypes.data, _lib.int32(len(arr), "len(ids)"),
                                              int(bool(skip_special)), byref(text), byref(n)))
        try:
            return _utf8(ctypes.string_at(text, n.value))
        finally:
            _lib.free(text)

    def stream(self, skip_special=False):
        """An incremental decoder: push ids one by one, then flush; the
        pieces joined equal decode() of the whole sequence."""
        return StreamDecoder(self, skip_special)


class _StreamState:
    """A StreamDecoder's native state: the drt_tokenizer_stream and the
    output buffer the library mallocs and grows (freed by drt_free)."""

    def __init__(self):
        self.st = _lib.TokenizerStreamC()
        self.buf = c_void_p()
        self.len = c_size_t(0)
        self.cap = c_size_t(0)
        _lib.lib().drt_tokenizer_stream_init(byref(self.st))

    def take(self):
        out = _utf8(ctypes.string_at(self.buf, self.len.value)) if self.len.value else ""
        self.len.value = 0  # the buffer is reused; pending bytes live in the stream state
        return out


class StreamDecoder(_lib.Handle):
    """drt_tokenizer_stream: ``push(id)`` returns the text completed by that
    id (whole UTF-8 characters only, possibly ""), ``flush()`` what is still
    pending (an incomplete character at the end becomes U+FFFD).

    Threads: it holds state (the pending bytes, its buffer), so its calls
    are taken one at a time: push or flush on another thread waits for the
    one in flight, as close() does. Each call uses the tokenizer too:
    closing the tokenizer waits for it, and later calls raise Closed."""

    def __init__(self, tokenizer, skip_special=False):
        self.tokenizer = tokenizer  # keeps the Python object alive
        self.skip_special = bool(skip_special)
        self._h = _StreamState()

    def _release(self, state):
        buf, state.buf = state.buf, c_void_p()
        if buf:
            _lib.free(buf)

    def push(self, id):
        """The text completed by ``id``; an id outside the tokenizer's
        [0, vocab_size) raises InvalidArgument (a ValueError) and changes
        nothing."""
        id = check_id(_lib.int32(id, "id"), self.tokenizer._vocab)
        L = _lib.lib()
        with self._exclusive(wait=True) as s, self.tokenizer._shared() as h:
            _lib.check(L.drt_tokenizer_stream_push(h, byref(s.st), id, int(self.skip_special),
                                                   byref(s.buf), byref(s.len), byref(s.cap)))
            return s.take()

    def flush(self):
        L = _lib.lib()
        with self._exclusive(wait=True) as s, self.tokenizer._shared() as h:
            _lib.check(L.drt_tokenizer_stream_flush(h, byref(s.st), byref(s.buf), byref(s.len), byref(s.cap)))
            return s.take()
