"""Test buffers of each kind the binding takes: torch tensors, NumPy arrays, and array.array (the buffer
protocol), filled from lists of small integers so that sums are exact."""

import array

import numpy as np
import torch

TORCH_DTYPES = {"int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64,
                "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64}
NUMPY_DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]
ARRAY_CODES = {"int8": "b", "uint8": "B", "int32": "i", "uint32": "I", "int64": "q", "uint64": "Q",
               "float32": "f", "float64": "d"}

# (kind, dtype) pairs covering every dtype of every kind
CASES = ([("torch", d) for d in TORCH_DTYPES] + [("numpy", d) for d in NUMPY_DTYPES] +
         [("array", d) for d in ARRAY_CODES])


def make(kind, dtype, values):
    if kind == "torch":
        return torch.tensor(values, dtype=torch.float64).to(TORCH_DTYPES[dtype])
    if kind == "numpy":
        return np.array(values, dtype=np.float64).astype(dtype)
    return array.array(ARRAY_CODES[dtype], [int(v) if ARRAY_CODES[dtype] not in "fd" else v for v in values])


def zeros(kind, dtype, count):
    return make(kind, dtype, [0] * count)


def values(buf):
    """The buffer's elements as Python floats."""
    if isinstance(buf, torch.Tensor):
        return buf.to(torch.float64).tolist()
    if isinstance(buf, np.ndarray):
        return buf.astype(np.float64).tolist()
    return [float(v) for v in buf]
