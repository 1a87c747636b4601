"""tinyllm.optim: SGD and AdamW, exactly torch.optim's, over tinyllm tensors.

SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False)
AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
Each has step(), zero_grad() (grads to None), state_dict() (a dict of
tensors sharing the optimizer's arrays, and floats, by "<index>.<name>")
and load_state_dict(). Each class lists its keyword names in
`hyperparameters`, which tinyllm.dist.zero.ZeroOptimizer checks **kw against.
"""

from ._C.optim import SGD, AdamW, Optimizer

__all__ = ["Optimizer", "SGD", "AdamW"]
