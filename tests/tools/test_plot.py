"""tools/plot: metrics files in the trainer's format give a PNG of the requested
size; files it cannot read give exit status 1 and a message naming the file
and line, never a traceback."""

import importlib.machinery
import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

PLOT = Path(__file__).resolve().parents[2] / "tools" / "plot"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def step_line(step, lr=None):
    """One line as metrics_line writes it (B * T = 1024 tokens a step), with "lr" when given."""
    record = {"step": step, "loss": 5.5 / (1 + 0.1 * step), "seconds": 0.125, "tokens_per_second": 8192.0,
              "grad_norm": 1.0, "ranks": [{"rank": 0, "params_bytes": 6674432, "grads_bytes": 6674432,
                                           "optimizer_bytes": 13348864, "peak_state_bytes": 26697728,
                                           "peak_rss_bytes": 165789696, "bytes_sent": 0, "theory_bytes_sent": 0}]}
    if lr is not None:
        record["lr"] = lr
    return json.dumps(record)


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def plot(*args):
    return subprocess.run([sys.executable, str(PLOT), *map(str, args)], capture_output=True, text=True, timeout=120)


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    return struct.unpack(">II", data[16:24])  # IHDR's width and height, right after the signature


def test_writes_a_png_of_the_requested_size(tmp_path):
    metrics = write(tmp_path / "run.jsonl", [step_line(s) for s in range(20)])
    out = tmp_path / "run.png"
    result = plot(metrics, "-o", out, "--size", "643x487", "--title", "a run")
    assert result.returncode == 0, result.stderr
    assert png_size(out) == (643, 487)


def test_plots_lr_and_validation_lines(tmp_path):
    lines = []
    for s in range(30):
        lines.append(step_line(s, lr=1e-3 * min(1.0, (s + 1) / 10)))
        if s % 10 == 9:
            lines.append(json.dumps({"step": s, "val_loss": 5.0 / (1 + 0.1 * s)}))
    out = tmp_path / "run.png"
    result = plot(write(tmp_path / "run.jsonl", lines), "-o", out)
    assert result.returncode == 0, result.stderr
    assert png_size(out) == (900, 700)


def test_plots_two_runs_in_one_picture(tmp_path):
    a = write(tmp_path / "a.jsonl", [step_line(s, lr=1e-3) for s in range(10)])
    b = write(tmp_path / "b.jsonl", [step_line(s) for s in range(5, 15)])  # resumed at step 5, no lr
    out = tmp_path / "both.png"
    result = plot(a, b, "-o", out, "--size", "400x300")
    assert result.returncode == 0, result.stderr
    assert png_size(out) == (400, 300)


@pytest.mark.parametrize("lines, where, message", [
    ([step_line(0), '{"step": 1, "loss": '], ":2: ", "not JSON"),
    ([step_line(0), step_line(1), '{"loss": 3.0}'], ":3: ", 'no "step" key'),
    ([step_line(0), "[1, 2]"], ":2: ", "expected a JSON object"),
    ([step_line(0), '{"step": "one", "loss": 3.0}'], ":2: ", '"step" must be an integer from 0 to 2**64 - 1'),
    ([step_line(0), '{"step": 1, "loss": "low"}'], ":2: ", '"loss" must be a number'),
    ([step_line(0), '{"step": 1e400, "loss": 3.0}'], ":2: ", '"step" must be an integer'),
    ([step_line(0), '{"step": 18446744073709551616, "loss": 3.0}'], ":2: ", '"step" must be an integer'),
    ([], ": ", "no step lines"),
    (['{"step": 9, "val_loss": 2.0}'], ": ", "no step lines"),
], ids=["BadJson", "NoStep", "NotAnObject", "StepNotAnInteger", "LossNotANumber", "StepInfinite", "StepBeyond64Bits",
        "EmptyFile", "OnlyValidation"])
def test_rejects_a_bad_file_naming_it_and_the_line(tmp_path, lines, where, message):
    good = write(tmp_path / "good.jsonl", [step_line(s) for s in range(3)])
    bad = write(tmp_path / "bad.jsonl", lines)
    out = tmp_path / "run.png"
    result = plot(good, bad, "-o", out)
    assert result.returncode == 1
    assert f"tools/plot: {bad}{where}" in result.stderr and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_rejects_a_missing_file(tmp_path):
    missing = tmp_path / "missing.jsonl"
    result = plot(missing, "-o", tmp_path / "run.png")
    assert result.returncode == 1
    assert f"tools/plot: {missing}: cannot be read (No such file or directory)" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_format_follows_the_extension(tmp_path):
    metrics = write(tmp_path / "run.jsonl", [step_line(s) for s in range(5)])
    assert plot(metrics, "-o", tmp_path / "run.svg").returncode == 0
    assert (tmp_path / "run.svg").read_text().lstrip().startswith("<?xml")
    assert plot(metrics, "-o", tmp_path / "run.pdf").returncode == 0
    assert (tmp_path / "run.pdf").read_bytes().startswith(b"%PDF")
    result = plot(metrics, "-o", tmp_path / "run.gif")
    assert result.returncode == 2 and "one of .png, .svg or .pdf" in result.stderr
    assert not (tmp_path / "run.gif").exists()


def load_plot():
    """tools/plot as a module, to look inside the panels it draws."""
    loader = importlib.machinery.SourceFileLoader("plot_tool", str(PLOT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("plot_tool", loader))
    loader.exec_module(module)
    return module


def with_values(step, **values):
    record = json.loads(step_line(step, lr=1e-3))
    record.update(values)
    return json.dumps(record)


@pytest.mark.parametrize("bad, key", [
    ({"loss": 1e308}, "loss"), ({"loss": -1e308}, "loss"), ({"loss": float("inf")}, "loss"),
    ({"loss": float("-inf")}, "loss"), ({"loss": float("nan")}, "loss"), ({"lr": 1e308}, "lr"),
    ({"tokens_per_second": float("inf")}, "tokens_per_second"),
    ({"seconds": 1e308, "tokens_per_second": 1e308}, "tokens_per_second"),  # and no B * T from their product
], ids=["LossHuge", "LossHugeNegative", "LossInf", "LossMinusInf", "LossNaN", "LrHuge", "TokensInf", "SecondsHuge"])
def test_values_that_cannot_be_drawn_are_left_out_with_a_note(tmp_path, bad, key):
    lines = [with_values(1, **bad), with_values(2), with_values(3), json.dumps({"step": 3, "val_loss": 1e308})]
    out = tmp_path / "run.png"
    result = plot(write(tmp_path / "run.jsonl", lines), "-o", out)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr, result.stderr
    assert "run.jsonl: left out 2 values that cannot be drawn" in result.stderr, result.stderr
    assert f": 1 {key}, 1 val_loss" in result.stderr, result.stderr
    assert png_size(out) == (900, 700)


def test_reads_the_bare_nan_and_inf_the_trainer_writes(tmp_path):
    # metrics_line formats doubles with {:.17g}: a diverged step reads "loss":nan.
    lines = [step_line(0), '{"step":1,"loss":nan,"lr":inf,"seconds":0.1,"tokens_per_second":-inf,"ranks":[]}',
             step_line(2)]
    out = tmp_path / "run.png"
    result = plot(write(tmp_path / "run.jsonl", lines), "-o", out)
    assert result.returncode == 0, result.stderr
    assert "left out 3 values that cannot be drawn" in result.stderr
    assert "1 loss, 1 lr, 1 tokens_per_second" in result.stderr
    assert png_size(out) == (900, 700)


def test_every_value_left_out_still_draws(tmp_path):
    lines = [with_values(s, loss=float("nan"), lr=float("inf"), tokens_per_second=float("nan")) for s in range(3)]
    result = plot(write(tmp_path / "run.jsonl", lines), "-o", tmp_path / "run.png")
    assert result.returncode == 0, result.stderr
    assert "left out 9 values" in result.stderr and "Warning" not in result.stderr, result.stderr


def panels_of(tmp_path, lines):
    """The axes tools/plot draws for one run, drawn into a figure we keep."""
    tool = load_plot()
    run = tool.read_run(write(tmp_path / "run.jsonl", lines), "run")
    import matplotlib.pyplot as plt

    _, axes = plt.subplots(3, 1)
    colors = ["C0"]
    for ax, panel in zip(axes, [tool.plot_loss, tool.plot_lr, tool.plot_throughput]):
        panel(ax, [run], colors)
    return axes


def drawn_points(ax):
    return [(x, y) for line in ax.get_lines() for x, y in zip(line.get_xdata(), line.get_ydata())]


def visible(ax):
    """Every line either has two points or a marker: a line through one point draws nothing."""
    return all(len(line.get_xdata()) > 1 or line.get_marker() not in (None, "None", "") for line in ax.get_lines())


def test_two_steps_show_the_second_steps_tokens_per_second(tmp_path):
    _, _, throughput = panels_of(tmp_path, [step_line(0), step_line(1)])
    assert drawn_points(throughput) == [(1, 8192.0)]
    assert visible(throughput)


def test_one_step_says_there_are_not_enough_steps_for_tokens_per_second(tmp_path):
    loss, lr, throughput = panels_of(tmp_path, [step_line(0, lr=1e-3)])
    assert drawn_points(throughput) == []
    assert any("not enough steps" in t.get_text() for t in throughput.texts)
    assert visible(loss) and visible(lr) and drawn_points(loss) != []
    result = plot(tmp_path / "run.jsonl", "-o", tmp_path / "run.png")
    assert result.returncode == 0 and result.stderr == "", result.stderr
