"""tinyllm.dist.zero against the test catalog of docs/ZERO.md, on threads and
on processes: the hand example at every stage and rank, the byte table,
DDP and every ZeRO stage against one process, the broadcast of rank 0's
weights, and the configurations that must be refused."""

import numpy as np
import pytest

import tinyllm
from support import BACKENDS, TinyNet, batch, rows, tiny_loss
from tinyllm import dist, optim
from tinyllm.dist.zero import DDP, ZeroOptimizer

HAND_AFTER_STEP = np.array([0.5, 1.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5])
# Bytes after the step, (params, grads, optimizer), by stage and rank (0, 3).
HAND_BYTES = {
    1: [(80, 104, 72), (80, 96, 48)],
    2: [(80, 24, 72), (80, 16, 48)],
    3: [(24, 24, 48), (16, 16, 32)],
}


def hand_step(comm, stage):
    """w = 0..9, rank r's loss sum((w - r)^2)/2, one AdamW step, lr 0.5, no decay."""
    w = tinyllm.tensor(np.arange(10.0), requires_grad=True)
    zo = ZeroOptimizer(optim.AdamW, [w], comm, stage, lr=0.5, weight_decay=0.0)
    zo.gather()
    zo.zero_grad()
    d = w - float(comm.rank)
    ((d * d).sum() * 0.5).backward()
    zo.step()
    memory = zo.memory_bytes()
    zo.gather()
    return w.numpy().copy(), memory, zo.chunk


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_hand_example_zero_step(backend, stage):
    results = dist.spawn(lambda comm: hand_step(comm, stage), 4, backend)
    for r, (w, _, chunk) in enumerate(results):
        np.testing.assert_allclose(w, HAND_AFTER_STEP, atol=1e-7, err_msg=f"rank {r}")
        assert chunk == dist.chunk_bounds(10, 4, r)
    assert [c for _, _, c in results] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    for r in range(1, 4):  # every rank holds the same bits
        np.testing.assert_array_equal(results[r][0], results[0][0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_hand_example_memory_by_stage(backend, stage):
    results = dist.spawn(lambda comm: hand_step(comm, stage), 4, backend)
    for r, expected in zip((0, 3), HAND_BYTES[stage]):
        m = results[r][1]
        assert (m["params"], m["grads"], m["optimizer"]) == expected, f"stage {stage}, rank {r}"
    assert sum(results[0][1].values()) == {1: 256, 2: 176, 3: 96}[stage]


def sgd_steps(net, opt, comm=None, ddp=None, steps=5, n_rows=8):
    grads = []
    for step in range(steps):
        x, y = batch(step, n_rows)
        if comm is not None:
            x, y = x[rows(comm, n_rows)], y[rows(comm, n_rows)]
        opt.zero_grad()
        model = ddp if ddp is not None else net
        d = model(tinyllm.tensor(x)) - tinyllm.tensor(y)
        (d * d).mean().backward()
        if ddp is not None:
            ddp.sync_grads()
        grads.append(np.concatenate([p.grad.numpy().ravel() for p in net.parameters()]))
        opt.step()
    return np.concatenate([p.numpy().ravel() for p in net.parameters()]), grads


def flat(net):
    return np.concatenate([p.numpy().ravel() for p in net.parameters()])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world", [2, 4])
def test_ddp_matches_single_process(backend, world):
    net = TinyNet(1)
    expected, _ = sgd_steps(net, optim.SGD(net.parameters(), lr=0.1, momentum=0.9))

    def rank(comm):
        net = TinyNet(1)
        ddp = DDP(net, comm)
        return sgd_steps(net, optim.SGD(net.parameters(), lr=0.1, momentum=0.9), comm, ddp)

    results = dist.spawn(rank, world, backend)
    for r, (w, grads) in enumerate(results):
        np.testing.assert_allclose(w, expected, rtol=0, atol=1e-10, err_msg=f"rank {r}")
        for step, g in enumerate(grads):
            np.testing.assert_array_equal(g, results[0][1][step], err_msg=f"rank {r}, step {step}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_ddp_broadcasts_rank0_weights(backend):
    def rank(comm):
        net = TinyNet(1 + 7 * comm.rank)  # every rank starts elsewhere
        ddp = DDP(net, comm)
        assert ddp.module is net and len(ddp.parameters()) == len(net.parameters())
        return sgd_steps(net, optim.SGD(net.parameters(), lr=0.1, momentum=0.9), comm, ddp)[0]

    results = dist.spawn(rank, 4, backend)
    net = TinyNet(1)
    expected, _ = sgd_steps(net, optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
    for r, w in enumerate(results):
        np.testing.assert_allclose(w, expected, rtol=0, atol=1e-10, err_msg=f"rank {r}")
        np.testing.assert_array_equal(w, results[0])


def adamw_steps(net, step_fn, steps=4, n_rows=8, comm=None):
    for step in range(steps):
        x, y = batch(step, n_rows)
        if comm is not None:
            x, y = x[rows(comm, n_rows)], y[rows(comm, n_rows)]
        step_fn(lambda: tiny_loss(net, x, y).backward())


ADAMW = dict(lr=0.05, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_matches_single_process(backend, world, stage):
    net = TinyNet(1)
    opt = optim.AdamW(net.parameters(), **ADAMW)

    def one_process(backward):
        opt.zero_grad()
        backward()
        opt.step()

    adamw_steps(net, one_process)
    expected = flat(net)
    state = opt.state_dict()
    expected_moments = np.concatenate([state[f"{i}.exp_avg"].numpy().ravel() for i in range(4)])

    def rank(comm):
        net = TinyNet(1)
        zo = ZeroOptimizer(optim.AdamW, net.parameters(), comm, stage, **ADAMW)

        def zero_step(backward):
            zo.gather()
            zo.zero_grad()
            backward()
            zo.step()

        adamw_steps(net, zero_step, comm=comm)
        zo.gather()
        a, b = zo.chunk
        return flat(net), a, b, zo._zero.master_chunk.numpy().copy()

    for r, (w, a, b, master) in enumerate(dist.spawn(rank, world, backend)):
        np.testing.assert_allclose(w, expected, rtol=0, atol=1e-10, err_msg=f"rank {r}")
        np.testing.assert_allclose(master, expected[a:b], rtol=0, atol=1e-10)
    assert expected_moments.size == 44


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_memory_is_one_over_p(backend):
    n, share = 44 * 8, 44 * 8 // 4
    expected = {1: (n, n + share, 3 * share), 2: (n, share, 3 * share), 3: (share, share, 2 * share)}

    def rank(comm):
        out = {}
        for stage in (1, 2, 3):
            net = TinyNet(1)
            assert net.num_parameters() == 44
            zo = ZeroOptimizer(optim.AdamW, net.parameters(), comm, stage, **ADAMW)
            for step in range(2):
                zo.gather()
                zo.zero_grad()
                x, y = batch(step, 8)
                tiny_loss(net, x[rows(comm, 8)], y[rows(comm, 8)]).backward()
                zo.step()
            m = zo.memory_bytes()
            out[stage] = (m["params"], m["grads"], m["optimizer"])
        return out

    for r, got in enumerate(dist.spawn(rank, 4, backend)):
        assert got == expected, f"rank {r}"
        assert sum(got[3]) * 4 == 4 * n


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_rejects_bad_stage(backend):
    def rank(comm):
        w = tinyllm.tensor(np.arange(10.0), requires_grad=True)
        for stage in (0, 4, -1):
            with pytest.raises(ValueError, match=rf"stage must be 1, 2 or 3 \(got {stage}\)"):
                ZeroOptimizer(optim.AdamW, [w], comm, stage)
        with pytest.raises(ValueError, match="must not be empty"):
            ZeroOptimizer(optim.AdamW, [], comm, 2)
        return ZeroOptimizer(optim.AdamW, [w], comm, 2).stage  # the group is still in step

    assert dist.spawn(rank, 2, backend) == [2, 2]


def test_zero_rejects_an_optimizer_that_is_not_tinyllms_and_unknown_hyperparameters():
    def rank(comm):
        w = tinyllm.tensor(np.arange(10.0), requires_grad=True)
        with pytest.raises(TypeError, match="opt_cls must be tinyllm.optim.SGD or tinyllm.optim.AdamW"):
            ZeroOptimizer(dict, [w], comm, 1, lr=0.1)
        with pytest.raises(TypeError, match="opt_cls"):
            ZeroOptimizer(optim.AdamW(([w])), [w], comm, 1)  # an instance, not the class
        with pytest.raises(TypeError, match=r"AdamW has no hyperparameter 'momentum' \(it takes lr, betas"):
            ZeroOptimizer(optim.AdamW, [w], comm, 1, momentum=0.9)
        with pytest.raises(ValueError, match="lr"):
            ZeroOptimizer(optim.SGD, [w], comm, 1, lr=-1.0)
        return True

    assert dist.spawn(rank, 2) == [True, True]


def test_zero_refuses_a_subclass_whose_step_it_would_ignore():
    # ZeroOptimizer steps the shard with the base class's C++ optimizer; a
    # Python override of step (or of any other method) would silently not run.
    class LoudAdamW(optim.AdamW):
        def step(self):
            raise AssertionError("ZeroOptimizer called the override")

    class DefaultSGD(optim.SGD):
        def __init__(self, params, lr=0.5):
            super().__init__(params, lr=lr)

    class Tagged(optim.AdamW):  # adds a method, overrides none: stepped exactly as AdamW
        def tag(self):
            return "tagged"

    def rank(comm):
        w = tinyllm.tensor(np.arange(10.0), requires_grad=True)
        with pytest.raises(TypeError, match=r"LoudAdamW overrides step, which would be ignored: .*C\+\+ optimizer "
                                            r"of the base class tinyllm.optim.AdamW.* not supported"):
            ZeroOptimizer(LoudAdamW, [w], comm, 1, lr=0.1)
        with pytest.raises(TypeError, match=r"DefaultSGD overrides __init__, .*tinyllm.optim.SGD"):
            ZeroOptimizer(DefaultSGD, [w], comm, 1)
        zo = ZeroOptimizer(Tagged, [w], comm, 1, lr=0.1)
        return zo.stage

    assert dist.spawn(rank, 2) == [1, 1]


def test_zero_stage3_refuses_released_parameters():
    def rank(comm):
        w = tinyllm.tensor(np.arange(10.0), requires_grad=True)
        zo = ZeroOptimizer(optim.SGD, [w], comm, 3, lr=0.1)
        with pytest.raises(ValueError, match="released"):
            w.numpy()
        with pytest.raises(ValueError, match="released"):
            (w * 2.0).sum()
        zo.gather()
        return w.numpy().copy()

    for w in dist.spawn(rank, 2):
        np.testing.assert_array_equal(w, np.arange(10.0))


def bitwise_steps(comm, stage, steps=4, n_rows=12):
    """Clipped AdamW steps in bitwise mode, one leaf per row; the flat parameters."""
    net = TinyNet(1)
    if stage == 0:
        trainer = DDP(net, comm, bitwise=True)
        opt = optim.AdamW(net.parameters(), **ADAMW)
    else:
        trainer = ZeroOptimizer(optim.AdamW, net.parameters(), comm, stage, bitwise=True, **ADAMW)
    for step in range(steps):
        x, y = batch(step, n_rows)
        x, y = x[rows(comm, n_rows)], y[rows(comm, n_rows)]
        if stage == 0:
            opt.zero_grad()
        else:
            trainer.gather()
            trainer.zero_grad()
        for i in range(len(x)):
            tiny_loss(net, x[i : i + 1], y[i : i + 1]).backward()
            trainer.add_leaf()
        if stage == 0:
            trainer.sync_grads()
        trainer.clip_grad_norm(0.1)
        (opt if stage == 0 else trainer).step()
    if stage == 3:
        trainer.gather()  # no units: every parameter
    return flat(net)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_bitwise_gives_one_processes_bits_at_every_world(backend, stage):
    expected = dist.spawn(lambda comm: bitwise_steps(comm, 0), 1, backend)[0]
    for world in [1, 2, 3, 4]:
        for r, w in enumerate(dist.spawn(lambda comm: bitwise_steps(comm, stage), world, backend)):
            np.testing.assert_array_equal(w.view(np.uint64), expected.view(np.uint64), err_msg=f"P={world} rank {r}")
