"""Tensor: the ops against NumPy and against central differences, NumPy
views that alias, conversion on the way in, and shape errors."""

import numpy as np
import pytest

import tinyllm
from support import gradcheck

rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape)


def test_ops_match_numpy():
    a, b = r(3, 4), r(3, 4)
    ta, tb = tinyllm.tensor(a), tinyllm.tensor(b)
    np.testing.assert_array_equal((ta + tb).numpy(), a + b)
    np.testing.assert_array_equal((ta - tb).numpy(), a - b)
    np.testing.assert_array_equal((ta * tb).numpy(), a * b)
    np.testing.assert_array_equal((ta * 2.5).numpy(), a * 2.5)
    np.testing.assert_array_equal((2.5 * ta).numpy(), 2.5 * a)
    np.testing.assert_array_equal((ta + 1.0).numpy(), a + 1.0)
    np.testing.assert_array_equal((1.0 - ta).numpy(), 1.0 - a)
    np.testing.assert_array_equal((-ta).numpy(), -a)
    np.testing.assert_allclose((ta @ tinyllm.tensor(b.T)).numpy(), a @ b.T, rtol=1e-14)
    assert ta.sum().item() == pytest.approx(a.sum(), rel=1e-14)
    assert ta.mean().item() == pytest.approx(a.mean(), rel=1e-14)
    assert ta.sum().shape == ()


# Each op's backward against central differences, eps 1e-6, tolerance 1e-7.
@pytest.mark.parametrize(
    "name, f, inputs",
    [
        ("add", lambda a, b: (a + b).sum(), [r(2, 3), r(2, 3)]),
        ("add_broadcast", lambda a, b: ((a + b) * (a + b)).sum(), [r(2, 3), r(3)]),
        ("sub", lambda a, b: ((a - b) * (a - b)).sum(), [r(2, 3), r(2, 3)]),
        ("mul", lambda a, b: (a * b).sum(), [r(2, 3), r(2, 3)]),
        ("mul_scalar", lambda a: ((a * 3.0) * a).mean(), [r(4)]),
        ("matmul", lambda a, b: ((a @ b) * (a @ b)).sum(), [r(2, 3), r(3, 4)]),
        ("matmul_batched", lambda a, b: (a @ b).sum(), [r(2, 2, 3), r(2, 3, 2)]),
        ("linear", lambda x, w, b: (tinyllm.linear(x, w, b) * tinyllm.linear(x, w, b)).sum(), [r(3, 4), r(2, 4), r(2)]),
        ("gelu", lambda a: tinyllm.gelu(a).sum(), [r(5)]),
        ("layer_norm", lambda x, w, b: (tinyllm.layer_norm(x, w, b) * x).sum(), [r(3, 4), r(4), r(4)]),
        ("cross_entropy", lambda z: tinyllm.cross_entropy(z, np.array([1, 0, 3])), [r(3, 5)]),
        ("embedding", lambda w: (tinyllm.embedding(w, np.array([[2, 0], [2, 1]])) * 1.5).sum(), [r(3, 2)]),
        ("reshape_transpose", lambda a: (a.reshape([3, 2]).transpose(0, 1) * a.reshape([2, 3])).sum(), [r(2, 3)]),
        (
            "causal_attention",
            lambda q, k, v: (tinyllm.causal_attention(q, k, v, 2) * tinyllm.causal_attention(q, k, v, 2)).sum(),
            [r(1, 3, 4), r(1, 3, 4), r(1, 3, 4)],
        ),
    ],
)
def test_gradient_matches_finite_differences(name, f, inputs):
    gradcheck(f, inputs)


def test_numpy_view_aliases_both_ways():
    t = tinyllm.tensor(np.zeros((2, 3)))
    v = t.numpy()
    assert v.flags.writeable and not v.flags.owndata
    v[1, 2] = 7.0
    assert t.numpy()[1, 2] == 7.0
    assert (t * 1.0).numpy()[1, 2] == 7.0  # the ops read the same memory
    assert np.shares_memory(t.numpy(), np.asarray(t))


def test_numpy_view_keeps_the_tensor_alive():
    v = tinyllm.tensor(np.arange(4.0)).numpy()
    np.testing.assert_array_equal(v * 2, [0, 2, 4, 6])


def test_tensor_copies_and_converts_its_input():
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    t = tinyllm.tensor(a)
    assert t.numpy().dtype == np.float64
    a[0, 0] = 100
    assert t.numpy()[0, 0] == 0.0  # a copy, as torch.tensor
    strided = np.arange(12.0).reshape(3, 4)[:, ::2]  # not contiguous: copied in order
    np.testing.assert_array_equal(tinyllm.tensor(strided).numpy(), strided)
    np.testing.assert_array_equal(tinyllm.tensor([[1, 2], [3, 4]]).numpy(), [[1, 2], [3, 4]])


def test_grad_requires_grad_and_leaves():
    w = tinyllm.tensor(np.array([1.0, 2.0]), requires_grad=True)
    assert w.grad is None and w.requires_grad and w.is_leaf
    y = (w * w).sum()
    assert not y.is_leaf
    y.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])
    (w * 3.0).sum().backward()  # accumulates
    np.testing.assert_array_equal(w.grad.numpy(), [5.0, 7.0])
    w.zero_grad()
    assert w.grad is None


def test_no_grad_records_nothing():
    w = tinyllm.tensor(np.ones(3), requires_grad=True)
    with tinyllm.no_grad():
        assert not tinyllm.is_grad_enabled()
        y = (w * 2.0).sum()
    assert tinyllm.is_grad_enabled()
    assert not y.requires_grad


def test_shape_mismatch_is_a_value_error_naming_both_shapes():
    with pytest.raises(ValueError, match=r"\[2, 3\].*\[4\]|\[4\].*\[2, 3\]"):
        tinyllm.tensor(np.ones((2, 3))) + tinyllm.tensor(np.ones(4))
    with pytest.raises(ValueError, match="matmul"):
        tinyllm.tensor(np.ones((2, 3))) @ tinyllm.tensor(np.ones((2, 3)))
    with pytest.raises(ValueError):
        tinyllm.tensor(np.ones(3)).sum().backward()  # no grad anywhere


def test_tensor_refuses_what_is_not_a_number():
    # NumPy's float cast would parse the strings and call float() on objects.
    for data in (["1.5", "2"], np.array(["a", "b"]), "3", [1.0, None], [1 + 2j], [object()]):
        with pytest.raises(TypeError, match="must be booleans, integers or floats"):
            tinyllm.tensor(data)
    np.testing.assert_array_equal(tinyllm.tensor([True, 2, 3.5]).numpy(), [1.0, 2.0, 3.5])
    with pytest.raises(TypeError):
        tinyllm.tensor(np.ones(2)) + "x"


def test_a_view_of_a_tensor_that_requires_grad_is_read_only_while_grad_is_on():
    a = tinyllm.tensor([1.0, 2.0], requires_grad=True)
    b = a * a
    with pytest.raises(ValueError, match="read-only"):
        a.numpy()[0] = 100.0
    b.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 4.0])
    assert tinyllm.tensor([1.0]).numpy().flags.writeable  # no grad: writable, as before


def test_a_write_under_no_grad_after_the_forward_refuses_the_backward():
    a = tinyllm.tensor([1.0, 2.0], requires_grad=True)
    b = (a * a).sum()
    with tinyllm.no_grad():
        a.numpy()[0] = 100.0
    with pytest.raises(ValueError, match="modified in place after the forward"):
        b.backward()
    assert a.grad is None
    (a * a).sum().backward()  # a new forward sees the new value
    np.testing.assert_array_equal(a.grad.numpy(), [200.0, 4.0])


def test_a_view_keeps_its_memory_when_zero_releases_the_parameter():
    from tinyllm import dist, optim
    from tinyllm.dist.zero import DDP, ZeroOptimizer

    def rank(comm):
        w = tinyllm.tensor(np.arange(8.0), requires_grad=True)
        zo = ZeroOptimizer(optim.SGD, [w], comm, 3, lr=0.5)
        zo.gather()
        before = w.numpy()
        seen = before.copy()
        (w * w).sum().backward()
        zo.step()  # releases w's values
        tinyllm.empty_cache()
        filler = tinyllm.full([8], -1.0)  # would take the freed block
        np.testing.assert_array_equal(before, seen)
        zo.gather()
        return w.numpy().copy(), filler.numpy().copy()

    for w, _ in dist.spawn(rank, 2):
        np.testing.assert_array_equal(w, np.arange(8.0) * 0.0)  # w - 0.5 * 2w

    # A view taken before DDP moves the values into its flat vector keeps the
    # old memory, never the averaged gradient that reuses it.
    def ddp_rank(comm):
        net = tinyllm.nn.Linear(4, 4)
        with tinyllm.no_grad():
            before = net.weight.numpy()
        seen = before.copy()
        model = DDP(net, comm)
        model(tinyllm.tensor(np.ones((2, 4)) * (comm.rank + 1))).sum().backward()
        model.sync_grads()
        tinyllm.empty_cache()
        return np.array_equal(before, seen)

    assert dist.spawn(ddp_rank, 2) == [True, True]


def test_a_shape_whose_product_overflows_is_a_value_error():
    for make in (lambda: tinyllm.zeros([2**32, 2**32]), lambda: tinyllm.full([2**63 + 1, 2], 7.0),
                 lambda: tinyllm.nn.Embedding(2**63 + 1, 2), lambda: tinyllm.nn.Linear(2, 2**62)):
        with pytest.raises(ValueError, match="more values than memory can address"):
            make()


def test_memory_that_is_not_there_is_a_memory_error():
    with pytest.raises(MemoryError, match="could not be allocated"):
        tinyllm.zeros([2**50])
