"""tinyllm.nn: modules written in Python register what they assign, the C++
layers against NumPy, and GPT's loss, shapes and errors."""

import subprocess
import sys
import textwrap

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


def run_alone(code):
    """Runs code in a fresh interpreter, as a failure here used to be a segfault that would end the whole run."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_forgetting_super_init_raises_attribute_error_not_a_crash():
    out = run_alone("""
        import numpy as np, tinyllm
        from tinyllm import nn

        def error_of(f):
            try:
                f()
            except Exception as e:
                return f"{type(e).__name__}: {e}"
            return "no error"

        class AssignsParameter(nn.Module):
            def __init__(self):
                self.w = tinyllm.tensor(np.ones(2), requires_grad=True)

        class AssignsModule(nn.Module):
            def __init__(self):
                self.fc = nn.Linear(2, 2)

        class CallsParameters(nn.Module):
            def __init__(self):
                self.parameters()

        class MyLinear(nn.Linear):
            def __init__(self):
                self.scale = 2.0  # a plain attribute is allowed, as in torch

        print(error_of(AssignsParameter))
        print(error_of(AssignsModule))
        print(error_of(CallsParameters))
        print(error_of(MyLinear))
        bare = CallsParameters.__new__(CallsParameters)
        for call in ("parameters", "named_parameters", "num_parameters", "zero_grad", "state_dict"):
            print(error_of(getattr(bare, call)))
        print(error_of(lambda: bare.load_state_dict({})))
        print(error_of(lambda: setattr(bare, "w", tinyllm.tensor(np.ones(1), requires_grad=True))))
        lin = MyLinear.__new__(MyLinear)
        print(error_of(lambda: lin.weight))
        print(error_of(lambda: lin(tinyllm.tensor(np.ones((1, 2))))))
        gpt = nn.GPT.__new__(nn.GPT)
        print(error_of(lambda: gpt.loss(np.zeros((1, 2), dtype=np.int64), np.zeros((1, 2), dtype=np.int64))))
        print("done")
    """).splitlines()
    before = "before Module.__init__() call"
    assert out[0] == f"AttributeError: cannot assign parameters {before} (AssignsParameter.__init__ must call super().__init__() first)"
    assert out[1].startswith(f"AttributeError: cannot assign module {before}")
    assert out[2].startswith(f"AttributeError: cannot call parameters() {before}")
    assert out[3] == "TypeError: tinyllm._C.nn.Linear.__init__() must be called when overriding __init__"
    for line, call in zip(out[4:9], ("parameters", "named_parameters", "num_parameters", "zero_grad", "state_dict")):
        assert line.startswith(f"AttributeError: cannot call {call}() {before}"), line
    assert out[9].startswith(f"AttributeError: cannot call load_state_dict() {before}")
    assert out[10].startswith(f"AttributeError: cannot assign parameters {before}")
    assert out[11].startswith(f"AttributeError: cannot read weight {before} (MyLinear.__init__")
    assert out[12].startswith(f"AttributeError: cannot call forward() {before}")
    assert out[13].startswith(f"AttributeError: cannot call loss() {before}")
    assert out[14] == "done"


class Tied(nn.Module):
    """An embedding whose table is also the output projection, as GPT-2 ties wte and lm_head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 3, seed=1)
        self.head = self.emb.weight  # the same tensor under a second name
        self.bias = tinyllm.tensor(np.zeros(5), requires_grad=True)

    def forward(self, ids):
        return tinyllm.linear(self.emb(ids), self.head) + self.bias


def test_tied_weights_are_one_parameter_under_two_state_dict_names():
    net = Tied()
    assert [name for name, _ in net.named_parameters()] == ["head", "bias"]  # own first, then the child's
    assert len(net.parameters()) == 2 and net.parameters()[0]._same(net.emb.weight)
    assert net.num_parameters() == 15 + 5
    state = net.state_dict()
    assert list(state) == ["head", "bias", "emb.weight"]
    assert state["head"]._same(state["emb.weight"])
    # The optimizer refuses a tensor listed twice; a tied weight is listed once and gets both uses' grads.
    opt = tinyllm.optim.SGD(net.parameters(), lr=0.1)
    ids = np.array([[0, 1, 2]])
    net(ids).sum().backward()
    emb_only = nn.Embedding(5, 3, seed=1)
    tinyllm.linear(emb_only(ids), tinyllm.tensor(emb_only.weight.numpy().copy())).sum().backward()
    assert not np.allclose(net.emb.weight.grad.numpy(), emb_only.weight.grad.numpy())  # the head's use adds in
    opt.step()
    assert net.head._same(net.emb.weight)


def test_tied_weights_reach_ddp_once():
    from tinyllm import dist
    from tinyllm.dist.zero import DDP

    ids = np.array([[0, 1, 2], [3, 4, 0]])
    single = Tied()
    single(ids).sum().backward()

    def rank(comm):
        net = Tied()
        ddp = DDP(net, comm)
        net(ids[comm.rank:comm.rank + 1]).sum().backward()
        ddp.sync_grads()
        return len(ddp.parameters()), net.emb.weight.grad.numpy().copy()

    for count, grad in dist.spawn(rank, 2):
        assert count == 2
        # The mean of the ranks' halves of the batch: half the whole batch's sum, both uses added once.
        np.testing.assert_allclose(grad, single.emb.weight.grad.numpy() / 2, rtol=1e-12)


def parameter(*values):
    return tinyllm.tensor(np.array(values, dtype=np.float64), requires_grad=True)


class Three(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = parameter(1.0)
        self.w = parameter(2.0)
        self.fc = nn.Linear(2, 2)
        self.z = parameter(3.0)


def names(m):
    return [name for name, _ in m.named_parameters()]


def test_reassigning_a_name_replaces_its_registration_in_place():
    net = Three()
    new = parameter(5.0, 6.0)
    net.w = new
    assert names(net) == ["a", "w", "z", "fc.weight", "fc.bias"]
    assert net.parameters()[1]._same(new) and net.w._same(new)
    net.fc = nn.Linear(2, 3, bias=False)
    assert names(net) == ["a", "w", "z", "fc.weight"]
    assert net.state_dict()["fc.weight"].shape == (3, 2)
    net.fc = parameter(7.0)  # a parameter where a child was: the child goes, the parameter joins the end
    assert names(net) == ["a", "w", "z", "fc"]
    net.a = nn.LayerNorm(2)
    assert names(net) == ["w", "z", "fc", "a.weight", "a.bias"]


def test_none_or_del_unregisters_and_other_values_are_refused():
    net = Three()
    net.w = None
    assert names(net) == ["a", "z", "fc.weight", "fc.bias"] and net.w is None
    net.w = parameter(4.0)  # a new registration, at the end of the parameters
    assert names(net) == ["a", "z", "w", "fc.weight", "fc.bias"]
    del net.a
    del net.fc
    assert names(net) == ["z", "w"] and not hasattr(net, "a") and not hasattr(net, "fc")
    with pytest.raises(TypeError, match=r"cannot assign 'Tensor' as parameter 'z' \(a leaf Tensor that requires "
                                        r"grad, or None, expected\)"):
        net.z = tinyllm.tensor(np.ones(1))  # no grad
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'z'"):
        net.z = net.w * 2.0  # not a leaf
    with pytest.raises(TypeError, match="cannot assign 'int' as parameter 'z'"):
        net.z = 3
    net.fc = nn.Linear(1, 1)
    with pytest.raises(TypeError, match=r"cannot assign 'float' as child module 'fc' \(a Module, or None, expected\)"):
        net.fc = 1.5
    assert names(net) == ["z", "w", "fc.weight", "fc.bias"]  # refusals change nothing
    net.note = tinyllm.tensor(np.ones(1))  # an unregistered name takes anything
    net.note = 3


def test_a_c_plus_plus_modules_own_attributes_stay_read_only():
    lin = nn.Linear(2, 2)
    with pytest.raises(AttributeError):
        lin.weight = parameter(1.0, 2.0)
    with pytest.raises(AttributeError):
        del lin.bias
    assert names(lin) == ["weight", "bias"]


def test_module_state_dict_round_trips_and_load_copies_values_in():
    net = Tied()
    saved = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    other = Tied()
    other.bias = parameter(*range(5))
    other.load_state_dict(saved)
    np.testing.assert_array_equal(other.bias.numpy(), np.zeros(5))
    other.load_state_dict(other.state_dict())  # its own tensors: a copy onto itself
    np.testing.assert_array_equal(other.emb.weight.numpy(), saved["emb.weight"])
