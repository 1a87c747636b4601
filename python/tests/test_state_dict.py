"""load_state_dict of modules and optimizers: every wrong type names the key,
the type expected and the type given; wrong shapes name the key and both
shapes; missing and unexpected names are listed."""

import numpy as np
import pytest

import tinyllm
from tinyllm import nn, optim


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = tinyllm.tensor(np.ones(3), requires_grad=True)
        self.fc = nn.Linear(3, 2)


def stepped(opt_cls, **kw):
    w = tinyllm.tensor(np.ones(3), requires_grad=True)
    opt = opt_cls([w], **kw)
    w.sum().backward()
    opt.step()
    return opt


@pytest.mark.parametrize("key, value, message", [
    ("0.step", "3", r"AdamW.load_state_dict: '0.step' must be an int \(got str '3'\)"),
    ("0.step", None, r"'0.step' must be an int \(got NoneType None\)"),
    ("0.step", True, r"'0.step' must be an int \(got bool True\)"),
    ("0.step", np.ones(3), r"'0.step' must be an int \(got ndarray array\("),
    ("0.exp_avg", 1.0, r"'0.exp_avg' must be a Tensor or a numeric array \(got float 1.0\)"),
    ("0.exp_avg", "x", r"'0.exp_avg' must be a Tensor or a numeric array \(got str 'x'\)"),
    ("0.exp_avg", np.array(["a", "b", "c"]), r"'0.exp_avg' must be a Tensor or a numeric array \(got ndarray"),
    ("0.exp_avg_sq", [1.0, 2.0, 3.0], r"'0.exp_avg_sq' must be a Tensor or a numeric array \(got list \[1.0"),
    ("0.extra", "x", r"'0.extra' must be a Tensor, a numeric array or a number \(got str 'x'\)"),
], ids=["StepStr", "StepNone", "StepBool", "StepArray", "ExpAvgFloat", "ExpAvgStr", "ExpAvgStrings", "ExpAvgSqList",
        "UnknownStr"])
def test_adamw_names_the_key_and_both_types(key, value, message):
    opt = stepped(optim.AdamW)
    state = opt.state_dict()
    state[key] = value
    with pytest.raises(TypeError, match=message):
        opt.load_state_dict(state)


def test_sgd_names_the_key_and_both_types():
    opt = stepped(optim.SGD, momentum=0.9)
    with pytest.raises(TypeError, match=r"SGD.load_state_dict: '0.momentum_buffer' must be a Tensor or a numeric "
                                        r"array \(got int 3\)"):
        opt.load_state_dict({"0.momentum_buffer": 3})


def test_optimizer_keys_must_be_strings():
    with pytest.raises(TypeError, match=r"keys must be str \(got int 0\)"):
        stepped(optim.AdamW).load_state_dict({0: 1.0})


def test_optimizer_wrong_shape_names_the_key_and_both_shapes():
    opt = stepped(optim.AdamW)
    state = opt.state_dict()
    state["0.exp_avg"] = np.ones(4)
    with pytest.raises(ValueError, match=r"0.exp_avg has shape \[4\] but parameter 0 has shape \[3\]"):
        opt.load_state_dict(state)


def test_optimizer_still_loads_whole_float_and_int_steps():
    opt = stepped(optim.AdamW)
    for step in (2.0, 2, np.int64(2)):
        state = opt.state_dict()
        state["0.step"] = step
        opt.load_state_dict(state)
        assert opt.state_dict()["0.step"] == 2.0


@pytest.mark.parametrize("value, message", [
    ("x", r"Net.load_state_dict: 'w' must be a Tensor or a numeric array \(got str 'x'\)"),
    (1.0, r"'w' must be a Tensor or a numeric array \(got float 1.0\)"),
    (None, r"'w' must be a Tensor or a numeric array \(got NoneType None\)"),
    (np.array(["a", "b", "c"]), r"'w' must be a Tensor or a numeric array \(got ndarray"),
], ids=["Str", "Float", "None", "Strings"])
def test_module_names_the_key_and_both_types(value, message):
    net = Net()
    state = net.state_dict()
    state["w"] = value
    with pytest.raises(TypeError, match=message):
        net.load_state_dict(state)


def test_module_wrong_shape_and_names_are_listed_and_nothing_is_copied():
    net = Net()
    state = {k: v.numpy().copy() + 1 for k, v in net.state_dict().items()}
    state["fc.weight"] = np.ones((3, 2))
    del state["fc.bias"]
    state["fc.extra"] = np.ones(1)
    with pytest.raises(ValueError, match=r"Module::load_state_dict: missing fc.bias; unexpected fc.extra; "
                                         r"fc.weight has shape \[3, 2\] but the parameter has shape \[2, 3\]"):
        net.load_state_dict(state)
    np.testing.assert_array_equal(net.w.numpy(), np.ones(3))  # a refused load copies nothing


def test_module_keys_must_be_strings():
    with pytest.raises(TypeError, match=r"Net.load_state_dict: keys must be str \(got int 1\)"):
        Net().load_state_dict({1: np.ones(3)})


def test_module_load_moves_the_version_on():
    net = Net()
    loss = (net.w * net.w).sum()  # saves w for the backward
    net.load_state_dict({k: v.numpy().copy() for k, v in net.state_dict().items()})
    with pytest.raises(ValueError, match="modified in place after the forward"):
        loss.backward()
