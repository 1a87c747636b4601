"""tools/plot: metrics files in the trainer's format give a PNG of the requested
size; files it cannot read give exit status 1 and a message naming the file
and line, never a traceback."""

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
    ([step_line(0), '{"step": "one", "loss": 3.0}'], ":2: ", '"step" must be a non-negative integer'),
    ([step_line(0), '{"step": 1, "loss": "low"}'], ":2: ", '"loss" must be a finite number'),
    ([], ": ", "no step lines"),
    (['{"step": 9, "val_loss": 2.0}'], ": ", "no step lines"),
], ids=["BadJson", "NoStep", "NotAnObject", "StepNotAnInteger", "LossNotANumber", "EmptyFile", "OnlyValidation"])
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
