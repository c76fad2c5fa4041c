"""Python values to C arguments: text, paths, seconds, unsigned integers, flags and the channel
options. Only what C cannot hold is refused here (a NUL in text, a negative size_t, a wrong
type); every value C can hold goes to libwool, which alone decides what is valid."""

from __future__ import annotations

import ctypes
import numbers
import os
from collections.abc import Mapping

def _c_text(value: str | bytes | None, name: str) -> bytes | None:
    """Text for a `const char *`: str as UTF-8, bytes as given, None as NULL.

    Lone surrogates are passed through (surrogatepass) so that libwool itself rejects the
    non-UTF-8 result with its own message. A NUL cannot be passed (C would cut the text
    there), hence the one check made here.
    """
    if value is None:
        return None
    if isinstance(value, str):
        data = value.encode("utf-8", errors="surrogatepass")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    else:
        raise TypeError(f"{name} must be str or bytes, not {type(value).__name__}")
    if b"\0" in data:
        raise ValueError(f"{name} contains a NUL character")
    return data


def _c_path(value: str | bytes | os.PathLike | None, name: str) -> bytes | None:
    """A file system path for a `const char *` (os.fsencode: bytes as the OS sees them)."""
    if value is None:
        return None
    try:
        data = os.fsencode(value)
    except TypeError:
        raise TypeError(
            f"{name} must be a path (str, bytes or os.PathLike), not {type(value).__name__}"
        ) from None
    if b"\0" in data:
        raise ValueError(f"{name} contains a NUL character")
    return data


def _c_seconds(value: float | None, name: str, *, none_means: float | None) -> float:
    """Seconds as a C double. Range checks are libwool's (0, negative, NaN...), not ours."""
    if value is None and none_means is not None:
        return none_means
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    return float(value)


_C_TYPE_NAMES = {ctypes.c_size_t: "size_t", ctypes.c_uint32: "uint32_t", ctypes.c_uint16: "uint16_t"}


def _c_unsigned(value: int, name: str, c_type: type[ctypes._SimpleCData], *,
                what: str = "channel option") -> int:
    """An int for an unsigned C parameter (size_t, uint32_t, uint16_t); `what` names the kind
    of parameter in the messages.

    ctypes would silently wrap a value the C type cannot hold (-1 becoming SIZE_MAX, 2**32 a
    uint32_t 0), so such a value is refused here, naming the option as libwool would. Every
    value the type can hold goes to libwool, which alone decides the option's range (0 and
    too large ones included).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    value = int(value)
    maximum = 2 ** (8 * ctypes.sizeof(c_type)) - 1
    if value < 0:
        raise ValueError(f"{what} {name} must not be negative, got {value}")
    if value > maximum:
        raise ValueError(
            f"{what} {name} must be at most {maximum} "
            f"(a C {_C_TYPE_NAMES[c_type]}), got {value}"
        )
    return value


def _c_flag(value: bool, name: str) -> bool:
    """A C bool: True or False only (not 0/1 or other truthy values)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {type(value).__name__}")
    return value


# The channel options, in the order they are applied: keyword (which is also the option's
# name in libwool, the suffix of its wool_channel_options_set_* setter) -> conversion to C.
_CHANNEL_OPTIONS = {
    "max_receive_message_bytes": lambda v, n: _c_unsigned(v, n, ctypes.c_size_t),
    "max_send_message_bytes": lambda v, n: _c_unsigned(v, n, ctypes.c_size_t),
    "keepalive_interval": lambda v, n: _c_seconds(v, n, none_means=None),
    "keepalive_timeout": lambda v, n: _c_seconds(v, n, none_means=None),
    "keepalive_without_calls": _c_flag,
    "max_pings_without_data": lambda v, n: _c_unsigned(v, n, ctypes.c_uint32),
    "max_concurrent_streams": lambda v, n: _c_unsigned(v, n, ctypes.c_size_t),
    "connect_timeout": lambda v, n: _c_seconds(v, n, none_means=None),
}


def _channel_options(given: Mapping[str, object]) -> dict[str, object]:
    """The channel options given (not None), converted for C, in the order they are applied."""
    return {
        name: convert(given[name], name)
        for name, convert in _CHANNEL_OPTIONS.items()
        if given.get(name) is not None
    }
