"""Turns torch tensors, NumPy arrays and buffer-protocol objects into (pointer, count, dtype) for the C API.

Every check here runs before anything is sent: a non-contiguous or read-only output, an unknown dtype or a
size mismatch raises InvalidArgumentError.
"""

import ctypes
import enum
import struct

from .errors import InvalidArgumentError


class DataType(enum.IntEnum):
    """bagua_datatype_t."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    BFLOAT16 = 7
    FLOAT32 = 8
    FLOAT64 = 9


ITEM_SIZE = {
    DataType.INT8: 1,
    DataType.UINT8: 1,
    DataType.INT32: 4,
    DataType.UINT32: 4,
    DataType.INT64: 8,
    DataType.UINT64: 8,
    DataType.FLOAT16: 2,
    DataType.BFLOAT16: 2,
    DataType.FLOAT32: 4,
    DataType.FLOAT64: 8,
}

_TORCH_DTYPES = {
    "torch.int8": DataType.INT8,
    "torch.uint8": DataType.UINT8,
    "torch.int32": DataType.INT32,
    "torch.uint32": DataType.UINT32,
    "torch.int64": DataType.INT64,
    "torch.uint64": DataType.UINT64,
    "torch.float16": DataType.FLOAT16,
    "torch.bfloat16": DataType.BFLOAT16,
    "torch.float32": DataType.FLOAT32,
    "torch.float64": DataType.FLOAT64,
}
# (kind, itemsize) of NumPy dtypes and of struct format characters
_KIND_SIZE_DTYPES = {
    ("i", 1): DataType.INT8,
    ("u", 1): DataType.UINT8,
    ("i", 4): DataType.INT32,
    ("u", 4): DataType.UINT32,
    ("i", 8): DataType.INT64,
    ("u", 8): DataType.UINT64,
    ("f", 2): DataType.FLOAT16,
    ("f", 4): DataType.FLOAT32,
    ("f", 8): DataType.FLOAT64,
}
_FORMAT_KINDS = {"b": "i", "h": "i", "i": "i", "l": "i", "q": "i", "n": "i",
                 "B": "u", "H": "u", "I": "u", "L": "u", "Q": "u", "N": "u",
                 "e": "f", "f": "f", "d": "f"}
_LITTLE_ENDIAN = struct.pack("=H", 1) == b"\x01\x00"


class Buffer:
    """One buffer as the C API sees it. `keep` holds what must stay alive while the library uses `ptr`."""

    __slots__ = ("ptr", "count", "dtype", "is_cuda", "device", "keep")

    def __init__(self, ptr, count, dtype, is_cuda=False, device=None, keep=None):
        self.ptr = ptr
        self.count = count
        self.dtype = dtype
        self.is_cuda = is_cuda
        self.device = device
        self.keep = keep


def _is_torch_tensor(obj):
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous")


def _from_torch(t, what, writable):
    dtype = _TORCH_DTYPES.get(str(t.dtype))
    if dtype is None:
        raise InvalidArgumentError(f"{what}: torch dtype {t.dtype} has no bagua datatype")
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{what}: the tensor is not contiguous (call .contiguous() first)")
    if getattr(t, "is_sparse", False):
        raise InvalidArgumentError(f"{what}: sparse tensors are not supported")
    is_cuda = t.device.type == "cuda"
    if not is_cuda and t.device.type != "cpu":
        raise InvalidArgumentError(f"{what}: tensors on {t.device.type} are not supported (CPU or CUDA only)")
    return Buffer(t.data_ptr(), t.numel(), dtype, is_cuda, t.device if is_cuda else None, t)


def _from_numpy(a, what, writable):
    dt = a.dtype
    if dt.name == "bfloat16":
        dtype = DataType.BFLOAT16
    else:
        dtype = _KIND_SIZE_DTYPES.get((dt.kind, dt.itemsize))
    if dtype is None:
        raise InvalidArgumentError(f"{what}: NumPy dtype {dt} has no bagua datatype")
    if dt.byteorder not in ("=", "|") and (dt.byteorder == "<") != _LITTLE_ENDIAN:
        raise InvalidArgumentError(f"{what}: NumPy dtype {dt} is not in native byte order")
    if not a.flags.c_contiguous:  # Fortran order would put blocks (allgather, scatter, ...) out of index order
        raise InvalidArgumentError(f"{what}: the array is not C-contiguous (use numpy.ascontiguousarray)")
    if writable and not a.flags.writeable:
        raise InvalidArgumentError(f"{what}: the array is read-only")
    # The interface is kept too: a NumPy scalar's is backed by a temporary array that lives as long as it does.
    interface = a.__array_interface__
    return Buffer(interface["data"][0], a.size, dtype, keep=(a, interface))


def _from_buffer_protocol(obj, what, writable):
    try:
        view = memoryview(obj)
    except TypeError:
        raise InvalidArgumentError(
            f"{what}: {type(obj).__name__} is neither a tensor, an array nor a buffer-protocol object"
        ) from None
    except ValueError as e:  # a released memoryview
        raise InvalidArgumentError(f"{what}: {e}") from None
    fmt = view.format
    if fmt and fmt[0] in "@=<>!":
        if fmt[0] in ">!" and _LITTLE_ENDIAN or fmt[0] == "<" and not _LITTLE_ENDIAN:
            raise InvalidArgumentError(f"{what}: buffer format {view.format!r} is not in native byte order")
        fmt = fmt[1:]
    dtype = _KIND_SIZE_DTYPES.get((_FORMAT_KINDS.get(fmt), view.itemsize))
    if dtype is None:
        raise InvalidArgumentError(f"{what}: buffer format {view.format!r} has no bagua datatype")
    if not view.c_contiguous:
        raise InvalidArgumentError(f"{what}: the buffer is not C-contiguous")
    count = view.nbytes // view.itemsize
    if view.nbytes == 0:
        holder = ctypes.create_string_buffer(1)
    elif view.readonly:
        if writable:
            raise InvalidArgumentError(f"{what}: the buffer is read-only")
        holder = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
    else:
        holder = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
    return Buffer(ctypes.addressof(holder), count, dtype, keep=(obj, holder))


def as_buffer(obj, what, writable):
    """The Buffer behind obj. what names the argument in errors."""
    if obj is None:
        raise InvalidArgumentError(f"{what} is None")
    if _is_torch_tensor(obj):
        return _from_torch(obj, what, writable)
    if type(obj).__module__ == "numpy" and hasattr(obj, "__array_interface__"):
        return _from_numpy(obj, what, writable)
    return _from_buffer_protocol(obj, what, writable)


def same_kind(a, b, what):
    """One call's buffers are all host or all on one CUDA device, and of one dtype."""
    if a.dtype != b.dtype:
        raise InvalidArgumentError(f"{what}: dtypes differ ({a.dtype.name} and {b.dtype.name})")
    if a.is_cuda != b.is_cuda or (a.is_cuda and a.device != b.device):
        raise InvalidArgumentError(f"{what}: buffers are on different devices")


def cuda_stream(buf, stream):
    """The stream argument: the caller's, else for CUDA tensors torch's current stream on their device."""
    if stream is not None:
        return getattr(stream, "cuda_stream", stream)
    if buf.is_cuda and buf.device is not None:
        import torch

        return torch.cuda.current_stream(buf.device).cuda_stream
    return None


def record_on_stream(bufs, stream):
    """A CUDA tensor used on a torch.cuda.Stream other than torch's current one on its device: tell torch's caching
    allocator (Tensor.record_stream), so that freeing the tensor after the call does not hand its memory to work on
    the current stream before that stream's use of it is done. A raw cudaStream_t is left alone (its device is not
    known here, and a wrong one would make the allocator fail when the tensor is freed): keep such a call's tensors
    until its stream has run it, as with the C API."""
    if stream is None or type(stream).__module__.split(".")[0] != "torch":
        return
    import torch

    if not isinstance(stream, torch.cuda.Stream):
        return
    for buf in bufs:
        if isinstance(buf, Buffer) and buf.is_cuda and isinstance(buf.keep, torch.Tensor):
            if stream != torch.cuda.current_stream(buf.device):
                buf.keep.record_stream(stream)


def order_after_current_stream(bufs):
    """Non-blocking calls on CUDA tensors read their input after the legacy default stream's earlier work (the C
    API): make that stream wait for torch's current stream too, where the input may still be being written."""
    for buf in bufs:  # the buffers a call keeps alive, and other objects it keeps (a Compression)
        if isinstance(buf, Buffer) and buf.is_cuda and buf.device is not None:
            import torch

            current = torch.cuda.current_stream(buf.device)
            default = torch.cuda.default_stream(buf.device)
            if current != default:
                default.wait_stream(current)
            return
