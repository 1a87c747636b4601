"""tinyllm.optim: SGD and AdamW against their definitions written in NumPy,
and state_dict / load_state_dict."""

import numpy as np
import pytest

import tinyllm
from tinyllm import optim

rng = np.random.default_rng(2)
W0 = rng.standard_normal(5)
GRADS = [rng.standard_normal(5) for _ in range(4)]


def run(opt_cls, **kw):
    w = tinyllm.tensor(W0, requires_grad=True)
    opt = opt_cls([w], **kw)
    for g in GRADS:
        opt.zero_grad()
        (w * tinyllm.tensor(g)).sum().backward()  # grad = g
        opt.step()
    return w.numpy().copy(), opt


def test_sgd_matches_its_definition():
    lr, mu, wd = 0.1, 0.9, 0.01
    w, buf = W0.copy(), None
    for g in GRADS:
        d = g + wd * w
        buf = d.copy() if buf is None else mu * buf + d
        w = w - lr * buf
    got, opt = run(optim.SGD, lr=lr, momentum=mu, weight_decay=wd)
    np.testing.assert_allclose(got, w, rtol=1e-14)
    np.testing.assert_allclose(opt.state_dict()["0.momentum_buffer"].numpy(), buf, rtol=1e-14)


def test_adamw_matches_its_definition():
    lr, (b1, b2), eps, wd = 0.01, (0.9, 0.99), 1e-8, 0.05
    w, m, v = W0.copy(), np.zeros(5), np.zeros(5)
    for t, g in enumerate(GRADS, start=1):
        w = w * (1 - lr * wd)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    got, opt = run(optim.AdamW, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    np.testing.assert_allclose(got, w, rtol=1e-13)
    state = opt.state_dict()
    assert set(state) == {"0.exp_avg", "0.exp_avg_sq", "0.step"} and state["0.step"] == 4.0
    np.testing.assert_allclose(state["0.exp_avg"].numpy(), m, rtol=1e-13)


def test_load_state_dict_resumes_exactly():
    full, _ = run(optim.AdamW, lr=0.01)
    w = tinyllm.tensor(W0, requires_grad=True)
    first = optim.AdamW([w], lr=0.01)
    for g in GRADS[:2]:
        first.zero_grad()
        (w * tinyllm.tensor(g)).sum().backward()
        first.step()
    saved = {k: (v.numpy().copy() if isinstance(v, tinyllm.Tensor) else v) for k, v in first.state_dict().items()}
    second = optim.AdamW([w], lr=0.01)
    second.load_state_dict(saved)  # arrays are copied in
    for g in GRADS[2:]:
        second.zero_grad()
        (w * tinyllm.tensor(g)).sum().backward()
        second.step()
    np.testing.assert_array_equal(w.numpy(), full)


def test_bad_hyperparameters_and_state_are_value_errors():
    w = tinyllm.tensor(W0, requires_grad=True)
    with pytest.raises(ValueError, match="lr"):
        optim.SGD([w], lr=-0.1)
    with pytest.raises(ValueError, match="beta"):
        optim.AdamW([w], betas=(1.5, 0.9))
    with pytest.raises(ValueError, match="empty"):
        optim.AdamW([])
    with pytest.raises(TypeError, match="item 1 is ndarray"):
        optim.SGD([w, np.ones(2)])
    with pytest.raises(ValueError, match="0.exp_avg"):
        optim.AdamW([w]).load_state_dict({"0.exp_avg": np.ones(5), "0.step": 1.0})
    opt = optim.SGD((p for p in [w]), lr=0.1)  # any iterable
    assert len(opt.parameters()) == 1
