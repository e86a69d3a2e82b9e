"""QAdam / 1-bit Adam's optimizer: Adam during warm-up, then the averaged momentum the scheduler hands back in
.grad with the variance frozen at its warm-up value.

After warm-up the momentum arrives with compression noise (about 1/500 of its chunk's range at 8 bits), and a
coordinate whose gradient was tiny all through warm-up (a weight of an input that is almost always zero, say)
has a frozen variance far below that noise: noise / sqrt(v) would throw it far off, and did on the digits
example. So each coordinate's normalized step m_hat / (sqrt(v_hat) + eps) is clamped to [-1, 1], the size of
Adam's own steps, and coordinates whose variance stayed exactly 0 get none.

weight_decay is decoupled, as in AdamW (the weights shrink by lr * weight_decay each step), in both phases: the
momentum the scheduler averages is the gradients' alone."""


import torch


class QAdamOptimizer(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, warmup_steps=100):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.warmup_steps = warmup_steps
        self.steps = 0

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():  # the closure's backward needs it, as in torch's own optimizers
                loss = closure()
        compressed = self.steps >= self.warmup_steps  # the scheduler sent momentum, not gradients
        self.steps += 1
        t = self.steps
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                grad = p.grad
                if group["weight_decay"]:  # decoupled (AdamW): the communicated momentum stays the gradients'
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                if compressed:
                    m.copy_(grad)
                else:
                    m.mul_(beta1).add_(grad, alpha=1 - beta1)
                    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                frozen_t = min(t, self.warmup_steps) if compressed else t
                m_hat_scale = 1 / (1 - beta1**t)
                v_hat = v / (1 - beta2 ** max(frozen_t, 1))
                update = m / v_hat.sqrt().add_(group["eps"])
                if compressed:
                    update.mul_(m_hat_scale).clamp_(-1.0, 1.0).masked_fill_(v == 0, 0.0)
                    p.add_(update, alpha=-group["lr"])
                else:
                    p.add_(update, alpha=-group["lr"] * m_hat_scale)
        return loss
