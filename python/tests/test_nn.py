"""tinyllm.nn: modules written in Python register what they assign, the C++
layers against NumPy, and GPT's loss, shapes and errors."""

import numpy as np
import pytest

import tinyllm
from support import TinyNet
from tinyllm import nn


def test_python_module_registers_parameters_and_children_in_order():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = tinyllm.tensor(np.ones(2), requires_grad=True)
            self.fc = nn.Linear(3, 2)
            self.ln = nn.LayerNorm(2)
            self._cache = tinyllm.tensor(np.ones(1), requires_grad=True)  # private: not a parameter
            self.constant = tinyllm.tensor(np.ones(1))  # no grad: not a parameter

        def forward(self, x):
            return self.ln(self.fc(x)) * self.scale

    net = Net()
    names = [name for name, _ in net.named_parameters()]
    assert names == ["scale", "fc.weight", "fc.bias", "ln.weight", "ln.bias"]
    assert [p.shape for p in net.parameters()] == [(2,), (2, 3), (2,), (2,), (2,)]
    assert net.num_parameters() == 2 + 6 + 2 + 2 + 2
    assert net.parameters()[0]._same(net.scale)
    out = net(tinyllm.tensor(np.ones((4, 3))))
    assert out.shape == (4, 2)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_module_without_forward_says_so():
    class Empty(nn.Module):
        pass

    with pytest.raises(NotImplementedError, match="Empty: a Module subclass must define forward"):
        Empty()(1)


def test_linear_layer_norm_embedding_match_numpy():
    lin = nn.Linear(4, 3)
    x = np.random.default_rng(1).standard_normal((5, 4))
    w, b = lin.weight.numpy(), lin.bias.numpy()
    np.testing.assert_allclose(lin(tinyllm.tensor(x)).numpy(), x @ w.T + b, rtol=1e-13)
    assert nn.Linear(4, 3, bias=False).bias is None
    assert len(nn.Linear(4, 3, bias=False).parameters()) == 1

    ln = nn.LayerNorm(4)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(ln(tinyllm.tensor(x)).numpy(), (x - mu) / np.sqrt(var + 1e-5), rtol=1e-12)

    emb = nn.Embedding(10, 3)
    ids = np.array([[1, 9], [1, 0]])
    np.testing.assert_array_equal(emb(ids).numpy(), emb.weight.numpy()[ids])


def test_gpt_loss_starts_near_log_vocab_and_trains():
    config = nn.GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=16)
    model = nn.GPT(config, seed=3)
    assert model.num_parameters() == config.num_parameters()
    assert model.config.n_embd == 16
    idx = np.arange(32).reshape(4, 8) % 16
    targets = (idx + 1) % 16
    assert model.forward(idx).shape == (4, 8, 16)
    opt = tinyllm.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for _ in range(20):
        opt.zero_grad()
        loss = model.loss(idx, targets)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert first == pytest.approx(np.log(16), abs=0.1)
    assert loss.item() < first - 0.5


def test_gpt_refuses_bad_shapes_and_configs():
    model = nn.GPT(nn.GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8))
    idx = np.zeros((2, 8), dtype=np.int64)
    with pytest.raises(ValueError, match=r"targets must have the inputs' shape \[2, 8\] \(got \[2, 4\]\)"):
        model.loss(idx, idx[:, :4])
    with pytest.raises(ValueError, match="2-d array"):
        model.loss(idx.ravel(), idx.ravel())
    with pytest.raises(ValueError):
        model.loss(np.zeros((1, 9), dtype=np.int64), np.zeros((1, 9), dtype=np.int64))  # longer than block_size
    with pytest.raises(ValueError):
        model.loss(idx + 16, idx)  # ids out of the vocabulary
    with pytest.raises(ValueError, match="not divisible by 3 heads"):
        nn.GPT(nn.GPTConfig(n_head=3, n_embd=8))


def test_tiny_net_has_44_parameters():
    assert TinyNet(1).num_parameters() == 44


def test_token_ids_are_converted_from_any_integer_type_and_refused_otherwise():
    model = nn.GPT(nn.GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8))
    ids = np.arange(16).reshape(2, 8) % 16
    expected = model.loss(ids.astype(np.int32), ids.astype(np.int32)).item()
    for dtype in (np.int64, np.uint8, np.int16, np.uint64):
        assert model.loss(ids.astype(dtype), ids.astype(dtype)).item() == expected
    assert model.loss(ids.tolist(), ids.tolist()).item() == expected
    assert model.loss(ids[:, ::-1].copy()[:, ::-1], ids).item() == expected  # a strided view, copied in order
    with pytest.raises(ValueError, match=r"GPT.loss: token ids must be integers \(got float64\)"):
        model.loss(ids.astype(np.float64), ids)
    with pytest.raises(ValueError, match=r"must fit in int32 \(got values from 0 to 4294967311\)"):
        model.loss(ids + np.int64(2**32) * (ids == 15), ids)
    with pytest.raises(ValueError, match="embedding: token ids must be integers"):
        tinyllm.embedding(tinyllm.tensor(np.ones((3, 2))), np.array([0.5]))
