"""Integer arguments, checked against their C type's range before ctypes (which would wrap them silently)."""

from .errors import InvalidArgumentError

C_INT_RANGE = (-2**31, 2**31 - 1)
SIZE_RANGE = (0, 2**64 - 1)  # size_t and uint64_t arguments


def _int(value, what, bounds=C_INT_RANGE):
    """An integer argument within the C type's range (ctypes would wrap it silently)."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(value.__index__())
        except AttributeError:
            raise InvalidArgumentError(f"{what} must be an integer, not {type(value).__name__}") from None
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise InvalidArgumentError(f"{what} {value} is outside [{bounds[0]}, {bounds[1]}]")
    return value
