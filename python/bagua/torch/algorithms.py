"""The algorithms of bagua.torch.DistributedDataParallel. Each says what the bucket scheduler communicates
(gradients or weights) and how; AsyncModelAverage averages weights on a background thread instead."""

from ..relaxations import Compression
from ..scheduler import BucketAlgorithm

AVG = 4


class Algorithm:
    kind = "gradients"  # "gradients", "weights" or "async"

    def scheduler_args(self):
        raise NotImplementedError


class GradientAllReduce(Algorithm):
    """Gradients averaged at full precision (what torch DDP does)."""

    def scheduler_args(self):
        return dict(algorithm=BucketAlgorithm.ALLREDUCE, op=AVG)


class ByteGrad(Algorithm):
    """Gradients averaged with 8-bit min-max compression (BAGUA's ByteGrad)."""

    def __init__(self, bits=8, chunk=1024, error_feedback=False):
        self.compression = Compression(bits=bits, chunk=chunk, error_feedback=error_feedback)

    def scheduler_args(self):
        return dict(algorithm=BucketAlgorithm.QUANTIZED, op=AVG, compression=self.compression)


class QAdam(Algorithm):
    """QAdam: exact gradient averages for warmup_steps, then Adam's momentum averaged 8-bit compressed with the
    variance frozen. Use with bagua.torch.QAdamOptimizer (same warmup_steps and beta1)."""

    def __init__(self, optimizer, compression=None):
        self.optimizer = optimizer
        self.compression = compression or Compression(bits=8, chunk=256)

    def scheduler_args(self):
        return dict(algorithm=BucketAlgorithm.QADAM, compression=self.compression,
                    warmup_steps=self.optimizer.warmup_steps, beta1=self.optimizer.defaults["betas"][0])


class OneBitAdam(QAdam):
    """1-bit Adam: QAdam with the momentum sent as signs with error feedback."""

    def __init__(self, optimizer):
        super().__init__(optimizer, Compression(kind="sign", chunk=256, error_feedback=True))


class Decentralized(Algorithm):
    """Decentralized SGD: each step the weights are gossip-averaged with peers over `topology` while forward and
    backward run; the optimizer then applies the gradient to the averaged weights."""

    kind = "weights"

    def __init__(self, topology="one_peer_exponential"):
        self.topology = topology

    def scheduler_args(self):
        return dict(algorithm=BucketAlgorithm.DECENTRALIZED, topology=self.topology)


class LowPrecisionDecentralized(Algorithm):
    """BAGUA's low-precision decentralized SGD on a ring: compressed weight differences, overlapped with
    forward and backward like Decentralized. float32 weights."""

    kind = "weights"

    def __init__(self, compression=None):
        self.compression = compression or Compression(bits=8, chunk=256)

    def scheduler_args(self):
        return dict(algorithm=BucketAlgorithm.LOW_PRECISION_DECENTRALIZED, compression=self.compression)


class AsyncModelAverage(Algorithm):
    """Asynchronous model averaging: a background thread averages the weights every interval_ms while the
    ranks train at their own pace. The weights are locked from forward to the optimizer's step (pass the
    optimizers to DistributedDataParallel)."""

    kind = "async"

    def __init__(self, interval_ms=5):
        self.interval_ms = interval_ms
