"""Finds and loads libbagua.so, and declares the C API's prototypes for ctypes."""

import ctypes
import os

from . import errors
from ._version import __version__

_SONAME = "libbagua.so.0"

c_status = ctypes.c_int
c_handle = ctypes.c_void_p
c_size = ctypes.c_size_t
c_ptr = ctypes.c_void_p


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class Config(ctypes.Structure):
    _fields_ = [
        ("size", c_size),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("timeout_ms", ctypes.c_int),
        ("bind_numa", ctypes.c_int),
        ("comm_name", ctypes.c_char_p),
    ]


OPKIND_COUNT = 16


class Stats(ctypes.Structure):
    _fields_ = [
        ("size", c_size),
        ("bytes_sent", ctypes.c_uint64),
        ("bytes_received", ctypes.c_uint64),
        ("messages_sent", ctypes.c_uint64),
        ("messages_received", ctypes.c_uint64),
        ("ops", ctypes.c_uint64 * OPKIND_COUNT),
        ("bytes_sent_by_op", ctypes.c_uint64 * OPKIND_COUNT),
        ("compute_ns", ctypes.c_uint64),
        ("quantized_full_precision", ctypes.c_uint64),
    ]


class Compression(ctypes.Structure):
    _fields_ = [
        ("size", c_size),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("kind", ctypes.c_int),
        ("bits", ctypes.c_int),
        ("chunk", c_size),
        ("stochastic", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("error_feedback", ctypes.c_int),
        ("hierarchical", ctypes.c_int),
    ]


class SchedulerConfig(ctypes.Structure):
    _fields_ = [
        ("size", c_size),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("algorithm", ctypes.c_int),
        ("op", ctypes.c_int),
        ("compression", ctypes.POINTER(Compression)),
        ("bucket_bytes", c_size),
        ("autotune", ctypes.c_int),
        ("hierarchical", ctypes.c_int),
        ("topology", ctypes.c_int),
        ("warmup_steps", ctypes.c_int),
        ("beta1", ctypes.c_float),
    ]


class SchedulerInfo(ctypes.Structure):
    _fields_ = [
        ("size", c_size),
        ("steps", ctypes.c_uint64),
        ("bucket_bytes", ctypes.c_uint64),
        ("buckets", ctypes.c_int),
        ("hierarchical", ctypes.c_int),
        ("tuning", ctypes.c_int),
        ("settled", ctypes.c_int),
        ("decisions", ctypes.c_uint64),
        ("step_ms", ctypes.c_double),
        ("bytes_sent", ctypes.c_uint64),
    ]


CONFIG_MAGIC = 0xBA6C0F16
COMPRESSION_MAGIC = 0xBA6CC0DE
SCHEDULER_MAGIC = 0xBA6C5C4D
CONFIG_UNDEF_INT = -2147483648

_P = ctypes.POINTER
# name: (argument types); every function returns bagua_status_t unless listed in _OTHER_RESTYPES.
_PROTOTYPES = {
    "bagua_status_string": [ctypes.c_int],
    "bagua_get_last_error": [c_handle],
    "bagua_get_version": [],
    "bagua_get_unique_id": [_P(UniqueId)],
    "bagua_comm_init_rank_config": [_P(c_handle), ctypes.c_int, UniqueId, ctypes.c_int, _P(Config)],
    "bagua_comm_init_from_env": [_P(c_handle)],
    "bagua_comm_destroy": [c_handle],
    "bagua_comm_abort": [c_handle],
    "bagua_comm_rank": [c_handle, _P(ctypes.c_int)],
    "bagua_comm_size": [c_handle, _P(ctypes.c_int)],
    "bagua_comm_local_rank": [c_handle, _P(ctypes.c_int)],
    "bagua_comm_local_size": [c_handle, _P(ctypes.c_int)],
    "bagua_comm_get_async_error": [c_handle, _P(ctypes.c_int)],
    "bagua_comm_get_stats": [c_handle, _P(Stats)],
    "bagua_comm_dump_trace": [c_handle, ctypes.c_char_p],
    "bagua_comm_split": [c_handle, ctypes.c_int, ctypes.c_int, _P(c_handle)],
    "bagua_comm_shrink": [c_handle, _P(c_handle)],
    "bagua_barrier": [c_handle, c_ptr],
    "bagua_ibarrier": [c_handle, _P(c_handle)],
    "bagua_allreduce": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, c_ptr],
    "bagua_iallreduce": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_reduce_scatter": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, c_ptr],
    "bagua_ireduce_scatter": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_allgather": [c_ptr, c_ptr, c_size, ctypes.c_int, c_handle, c_ptr],
    "bagua_iallgather": [c_ptr, c_ptr, c_size, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_broadcast": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, c_ptr],
    "bagua_ibroadcast": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_reduce": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, ctypes.c_int, c_handle, c_ptr],
    "bagua_ireduce": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_alltoall": [c_ptr, c_ptr, c_size, ctypes.c_int, c_handle, c_ptr],
    "bagua_ialltoall": [c_ptr, c_ptr, c_size, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_alltoallv": [c_ptr, _P(c_size), _P(c_size), c_ptr, _P(c_size), _P(c_size), ctypes.c_int, c_handle, c_ptr],
    "bagua_ialltoallv": [
        c_ptr, _P(c_size), _P(c_size), c_ptr, _P(c_size), _P(c_size), ctypes.c_int, c_handle, _P(c_handle)
    ],
    "bagua_gather": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, c_ptr],
    "bagua_igather": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_scatter": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, c_ptr],
    "bagua_iscatter": [c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_send": [c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, c_ptr],
    "bagua_isend": [c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_recv": [c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, c_ptr],
    "bagua_irecv": [c_ptr, c_size, ctypes.c_int, ctypes.c_int, c_handle, _P(c_handle)],
    "bagua_group_start": [],
    "bagua_group_end": [],
    "bagua_test": [c_handle, _P(ctypes.c_int)],
    "bagua_wait": [c_handle],
    "bagua_qstate_create": [c_handle, c_size, ctypes.c_int, _P(Compression), _P(c_handle)],
    "bagua_qstate_destroy": [c_handle],
    "bagua_qstate_residual": [c_handle, c_ptr, c_size],
    "bagua_quantized_allreduce": [
        c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, _P(Compression), c_handle, c_handle, c_ptr
    ],
    "bagua_iquantized_allreduce": [
        c_ptr, c_ptr, c_size, ctypes.c_int, ctypes.c_int, _P(Compression), c_handle, c_handle, _P(c_handle)
    ],
    "bagua_topology_create": [c_handle, ctypes.c_int, _P(c_handle)],
    "bagua_topology_create_from_edges": [
        c_handle, ctypes.c_int, _P(ctypes.c_int), _P(ctypes.c_int), _P(ctypes.c_double), ctypes.c_int, _P(c_handle)
    ],
    "bagua_topology_check": [c_handle],
    "bagua_topology_destroy": [c_handle],
    "bagua_topology_set_hierarchical": [c_handle, ctypes.c_int],
    "bagua_neighbor_allreduce": [c_ptr, c_ptr, c_size, ctypes.c_int, c_handle, ctypes.c_uint64, c_handle, c_ptr],
    "bagua_ineighbor_allreduce": [
        c_ptr, c_ptr, c_size, ctypes.c_int, c_handle, ctypes.c_uint64, c_handle, _P(c_handle)
    ],
    "bagua_lpdec_create": [c_handle, c_size, _P(Compression), c_ptr, _P(c_handle)],
    "bagua_lpdec_step": [c_handle, c_ptr],
    "bagua_lpdec_replica": [c_handle, ctypes.c_int, c_ptr, c_size],
    "bagua_lpdec_destroy": [c_handle],
    "bagua_async_average_start": [c_handle, c_ptr, c_size, ctypes.c_int, ctypes.c_int, _P(c_handle)],
    "bagua_async_average_lock": [c_handle],
    "bagua_async_average_unlock": [c_handle],
    "bagua_async_average_stats": [c_handle, _P(ctypes.c_uint64)],
    "bagua_async_average_stop": [c_handle],
    "bagua_scheduler_create": [c_handle, _P(SchedulerConfig), _P(c_handle)],
    "bagua_scheduler_register": [c_handle, ctypes.c_int, _P(c_ptr), _P(c_size), _P(ctypes.c_int)],
    "bagua_scheduler_mark_ready": [c_handle, ctypes.c_int, c_ptr],
    "bagua_scheduler_mark_unused": [c_handle, ctypes.c_int],
    "bagua_scheduler_skip_step": [c_handle],
    "bagua_scheduler_wait": [c_handle, c_ptr],
    "bagua_scheduler_set_bucket_bytes": [c_handle, c_size],
    "bagua_scheduler_get_info": [c_handle, _P(SchedulerInfo)],
    "bagua_scheduler_residual": [c_handle, ctypes.c_int, c_ptr, c_size],
    "bagua_scheduler_destroy": [c_handle],
}
_OTHER_RESTYPES = {
    "bagua_status_string": ctypes.c_char_p,
    "bagua_get_last_error": ctypes.c_char_p,
    "bagua_get_version": ctypes.c_int,
}


class LibraryNotFoundError(ImportError):
    """libbagua.so was not found; the message names every place that was tried."""


def candidate_paths():
    """Where the library is looked for, in order (the last entry is a name for the system loader)."""
    package_dir = os.path.dirname(os.path.abspath(__file__))
    # next to the package: the build tree (build/python/bagua), a pip-installed copy, or cmake --install's link
    paths = [os.path.join(package_dir, _SONAME)]
    from_env = os.environ.get("BAGUA_LIBRARY")
    if from_env:
        paths.append(from_env)
    paths.append(_SONAME)
    return paths


def _load():
    tried = []
    for path in candidate_paths():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (no such file)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as err:
            tried.append(f"{path} ({err})")
    raise LibraryNotFoundError(
        "bagua: libbagua.so not found. Build it (scripts/build.sh), install it (cmake --install build), "
        "or set BAGUA_LIBRARY to its path. Tried: " + "; ".join(tried)
    )


def _declare(lib):
    for name, argtypes in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = _OTHER_RESTYPES.get(name, c_status)


def _version_code(version):
    major, minor, patch = (int(part) for part in version.split(".")[:3])
    return major * 10000 + minor * 100 + patch


lib, path = _load()
_declare(lib)
VERSION_CODE = _version_code(__version__)
if lib.bagua_get_version() != VERSION_CODE:
    code = lib.bagua_get_version()
    raise ImportError(
        f"bagua: the Python package is {__version__} but {path} is "
        f"{code // 10000}.{code // 100 % 100}.{code % 100}; install matching versions or set BAGUA_LIBRARY"
    )


def last_error():
    """This thread's last error message (every failed call records it)."""
    return lib.bagua_get_last_error(None).decode("utf-8", "replace")


def check(status):
    """Raises the BaguaError subclass for a failed status."""
    if status != errors.SUCCESS and status != errors.IN_PROGRESS:
        raise errors.error_for(status, last_error())
    return status


def call(name, *args):
    """Calls bagua_<name> and raises on failure."""
    return check(getattr(lib, "bagua_" + name)(*args))
