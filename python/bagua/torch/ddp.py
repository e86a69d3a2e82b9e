"""bagua.torch.DistributedDataParallel: a module wrapper that trains data-parallel on the bucket scheduler.

Gradient algorithms register one flat gradient buffer per dtype (each parameter's .grad is a view of it, laid
out in backward order so buckets go in place); each parameter's gradient hook marks it ready as soon as it
is accumulated, and the end of backward waits for the step. Weight algorithms register a flat copy of the
weights: forward copies the weights in and starts the step, so the exchange overlaps forward and backward, and
the end of backward waits and copies the averaged weights back before the optimizer's step.
"""

import collections
import contextlib
import types
import weakref

import torch

from .. import default_communicator
from ..relaxations import AsyncAverage
from ..scheduler import Scheduler
from .algorithms import GradientAllReduce


def _flat_views(tensors):
    """One flat buffer per (dtype, device) and a view of it per tensor, in the given order."""
    groups = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.device), []).append(t)
    views = {}
    for (dtype, device), members in groups.items():
        flat = torch.zeros(sum(t.numel() for t in members), dtype=dtype, device=device)
        offset = 0
        for t in members:
            views[id(t)] = flat[offset:offset + t.numel()]
            offset += t.numel()
    return [views[id(t)] for t in tensors]


def _on_accumulated(param, callback):
    """callback() after param's gradient has been accumulated into .grad; returns what must stay referenced."""
    if hasattr(param, "register_post_accumulate_grad_hook"):  # torch >= 2.1
        return param.register_post_accumulate_grad_hook(lambda _: callback())
    accumulator = param.expand_as(param).grad_fn.next_functions[0][0]  # torch 1.x: the AccumulateGrad node
    accumulator.register_hook(lambda *_: callback())
    return accumulator


class DistributedDataParallel(torch.nn.Module):
    """Wraps module for data-parallel training over a bagua communicator (default: bagua.init()'s).

    algorithm: a bagua.torch algorithm (default GradientAllReduce()). Parameters and buffers are broadcast from
    rank 0 here. find_unused_parameters: parameters that get no gradient in a step count as zeros (otherwise
    that is an error, as in torch DDP). optimizers: needed by AsyncModelAverage, whose weights are locked from
    forward to the optimizer's step. bucket_bytes / autotune: the scheduler's bucket size and online tuning.
    """

    def __init__(self, module, algorithm=None, comm=None, find_unused_parameters=False, broadcast_buffers=True,
                 optimizers=(), bucket_bytes=0, autotune=True):
        super().__init__()
        self.module = module
        self.comm = comm or default_communicator()
        self.algorithm = algorithm or GradientAllReduce()
        self.find_unused_parameters = find_unused_parameters
        self.broadcast_buffers = broadcast_buffers
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._sync = True
        self._in_flight = False  # a step has marks and no wait yet
        self._marked = set()
        self._queued = False  # the end-of-backward callback is queued
        self._events = []  # CUDA events of this step's marks
        # The scheduler's thread reads a step's events after a device step's wait has returned; the first mark of
        # step g waits for step g - 2 to finish, so the events of the last steps are kept until then.
        self._older_events = collections.deque(maxlen=3)
        self._keep = []
        self._broadcast_from_rank0([p.data for p in module.parameters()] + list(module.buffers()))
        # backward produces the last layers' gradients first: register in that order
        self._order = list(reversed(self._params))
        self._index = {id(p): i for i, p in enumerate(self._order)}
        self._scheduler = None
        self._async = None
        if self.algorithm.kind == "async":
            self._start_async(optimizers)
        else:
            self._scheduler = Scheduler(self.comm, bucket_bytes=bucket_bytes, autotune=autotune,
                                        **self.algorithm.scheduler_args())
            self._buffers_for_comm = _flat_views([p.detach() for p in self._order])
            if self.algorithm.kind == "gradients":
                for p, view in zip(self._order, self._buffers_for_comm):
                    p.grad = view.view_as(p)
            else:
                for p, view in zip(self._order, self._buffers_for_comm):
                    view.copy_(p.detach().reshape(-1))
            self._scheduler.register(self._buffers_for_comm)
            this = weakref.ref(self)
            for p in self._order:
                i = self._index[id(p)]
                self._keep.append(_on_accumulated(p, lambda i=i: this() and this()._gradient_ready(i)))

    # ---- setup ----
    def _broadcast_from_rank0(self, tensors):
        with torch.no_grad():
            for t in tensors:
                if t.numel():
                    flat = t if t.is_contiguous() else t.contiguous()
                    self.comm.broadcast(flat, root=0)
                    if flat is not t:
                        t.copy_(flat)

    def _start_async(self, optimizers):
        if not optimizers:
            raise ValueError("AsyncModelAverage needs optimizers=[...]: it locks the weights from forward to "
                             "each optimizer's step")
        dtypes = {p.dtype for p in self._params}
        if len(dtypes) != 1:
            raise ValueError(f"AsyncModelAverage averages one flat buffer: the parameters have dtypes {dtypes}")
        views = _flat_views([p.detach() for p in self._params])
        with torch.no_grad():
            for p, view in zip(self._params, views):
                view.copy_(p.reshape(-1))
                p.data = view.view_as(p)  # the parameters now live in the averaged buffer
        self._flat = views[0]._base if views[0]._base is not None else views[0]
        self._async = AsyncAverage(self.comm, self._flat, self.algorithm.interval_ms)
        self._locked = False
        this = weakref.ref(self)
        for opt in optimizers:
            step = opt.step

            def locked_step(_opt, *args, _step=step, **kwargs):
                result = _step(*args, **kwargs)
                ddp = this()
                if ddp is not None and ddp._locked:
                    ddp._locked = False
                    ddp._async_unlock()
                return result

            locked_step.__doc__ = step.__doc__
            locked_step.__dict__.update(getattr(step, "__dict__", {}))  # a scheduler's mark on the step it wrapped
            # A bound method, as torch's learning-rate schedulers expect of opt.step (they read __self__/__func__).
            opt.step = types.MethodType(locked_step, opt)

    def _async_unlock(self):
        p = self._params[0]
        if p.device.type == "cuda":  # the averaging thread reads the buffer once unlocked: the step must be done
            torch.cuda.current_stream(p.device).synchronize()
        self._async.unlock()

    def _async_lock(self):
        self._async.lock()

    # ---- the step ----
    def forward(self, *inputs, **kwargs):
        if self.broadcast_buffers and self._sync:
            buffers = list(self.module.buffers())
            if buffers:
                self._broadcast_from_rank0(buffers)
        if self._async is not None and self.training and not self._locked:
            self._async_lock()
            self._locked = True
        if self.algorithm.kind == "gradients" and self._sync and (self._queued or self._marked):
            # the last backward stopped before its end (an exception): finish its step before this one
            self._finish_gradients(complain=False)
        if self.algorithm.kind == "weights" and self.training and self._sync and torch.is_grad_enabled():
            if self._in_flight:  # a forward without backward: finish that step first
                self._finish_weights()
            with torch.no_grad():
                for p, view in zip(self._order, self._buffers_for_comm):
                    view.copy_(p.reshape(-1))
            event = self._event_for(self._order[0])  # after the copies, on the current stream
            for i in range(len(self._order)):
                self._scheduler.mark_ready(i, event)
            self._in_flight = True
            self._queued = False
        return self.module(*inputs, **kwargs)

    def _gradient_ready(self, i):
        if not self._sync or self._scheduler is None:
            return
        if not getattr(self, "_queued", False):
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        if self.algorithm.kind != "gradients":
            return
        p, view = self._order[i], self._buffers_for_comm[i]
        if p.grad is None or p.grad.data_ptr() != view.data_ptr():
            # the caller set .grad to None (zero_grad's default from torch 2.0) or accumulated outside a synced
            # step: back into the view
            with torch.no_grad():
                if p.grad is None:
                    view.zero_()
                else:
                    view.copy_(p.grad.reshape(-1))
            p.grad = view.view_as(p)
        self._scheduler.mark_ready(i, self._event_for(p))
        self._marked.add(i)
        self._in_flight = True

    def _event_for(self, p):
        """CUDA: an event on the current stream after the gradient, kept until the step's wait."""
        if p.device.type != "cuda":
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(p.device))  # p's device, whichever device is current
        self._events.append(event)
        return event.cuda_event

    def _end_of_backward(self):
        self._queued = False
        if self.algorithm.kind == "weights":
            if self._in_flight:
                self._finish_weights()
            return
        self._finish_gradients(complain=True)

    def _retire_events(self):
        self._older_events.append(self._events)
        self._events = []

    def _finish_gradients(self, complain):
        """Marks what backward did not reach as unused and waits for the step."""
        self._queued = False
        unused = [i for i in range(len(self._order)) if i not in self._marked]
        for i in unused:
            self._scheduler.mark_unused(i)
        self._marked.clear()
        try:
            self._scheduler.wait(self._stream())
        finally:
            self._retire_events()
        self._in_flight = False
        for i in unused:  # they receive the average like the others
            p = self._order[i]
            p.grad = self._buffers_for_comm[i].view_as(p)
        if complain and unused and not self.find_unused_parameters:
            names = {id(p): n for n, p in self.module.named_parameters()}
            missing = ", ".join(names.get(id(self._order[i]), "?") for i in unused[:5])
            raise RuntimeError(f"bagua DistributedDataParallel: parameters got no gradient this step ({missing}); "
                               "pass find_unused_parameters=True if that is intended")

    def _finish_weights(self):
        try:
            self._scheduler.wait(self._stream())
        finally:
            self._retire_events()
        self._in_flight = False
        with torch.no_grad():
            for p, view in zip(self._order, self._buffers_for_comm):
                p.copy_(view.view_as(p))

    def _stream(self):
        p = self._order[0]
        return torch.cuda.current_stream(p.device).cuda_stream if p.device.type == "cuda" else None

    @contextlib.contextmanager
    def no_sync(self):
        """Gradients accumulate locally inside; the next backward outside communicates their sum."""
        before, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = before

    # ---- state ----
    def scheduler_info(self):
        return self._scheduler.info() if self._scheduler is not None else None

    def averaging_rounds(self):
        return self._async.rounds if self._async is not None else None

    def close(self):
        """Ends the algorithm. AsyncModelAverage stops averaging and leaves every rank with the exact average
        of the weights."""
        if self._async is not None:
            if self._locked:
                self._locked = False
                self._async_unlock()
            self._async.stop()
            self._async = None
            with torch.no_grad():
                self.comm.allreduce(self._flat, op=4)
        if self._scheduler is not None:
            if self._in_flight and self.algorithm.kind == "weights":
                self._finish_weights()
            elif self._marked or self._queued:
                self._finish_gradients(complain=False)
            self._scheduler.close()  # waits for device steps still running
            self._scheduler = None
            self._events, self._older_events = [], collections.deque(maxlen=3)
