"""PyTorch integration: bagua.torch.DistributedDataParallel on the bucket scheduler, its algorithms, the QAdam
optimizer, and comm hooks for torch's own DistributedDataParallel (docs/python.md)."""

from . import hooks
from .algorithms import (AsyncModelAverage, ByteGrad, Decentralized, GradientAllReduce, LowPrecisionDecentralized,
                         OneBitAdam, QAdam)
from .ddp import DistributedDataParallel
from .optim import QAdamOptimizer
from .process_group import init_process_group

__all__ = ["DistributedDataParallel", "GradientAllReduce", "ByteGrad", "QAdam", "OneBitAdam", "Decentralized",
           "LowPrecisionDecentralized", "AsyncModelAverage", "QAdamOptimizer", "hooks", "init_process_group"]
