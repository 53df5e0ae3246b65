"""Data never drives the terminal (issue 44 item 6): metric names and values, error messages and
what a run directory holds are shown escaped by fit()'s display and by `trainkit runs`, `show` and
`plot`, never read as rich markup, and drawing never fails a run."""

import json
import os
import sys
import unicodedata

import pytest

import trainkit
from trainkit import FailureConfig, ScalingConfig
from trainkit._internal import display as display_mod
from trainkit.testing import subprocesses

NAME = "\x1b]0;pwn\x07loss\u202e"  # an OSC title sequence, a bidi override
VALUE = "[/x] \x1b[2J"  # a closing tag rich cannot match, clear-screen
HYPERLINK = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"  # OSC 8
HOSTILE = f"{HYPERLINK} [/x] [bold]b[/bold] :smile: \u2066iso\u2069 \u200fm \u061c \x9b2J \x7f \ud800 end"


def unsafe_characters(text: str) -> list[str]:
    """What a terminal would act on: control characters other than newline and tab (ESC, BEL, C1,
    DEL, ...), format characters (bidi overrides and isolates, marks, zero-width) and surrogates."""
    return sorted({repr(ch) for ch in text
                   if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")})


def decoded(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")


# -- the function ---------------------------------------------------------------------------------


def test_terminal_safe_escapes_what_a_terminal_acts_on_and_keeps_the_rest():
    from trainkit._internal.terminal import terminal_safe

    assert terminal_safe(NAME) == "\\x1b]0;pwn\\x07loss\\u202e"
    assert (terminal_safe("a\nb\tc\r\x85\x7f\u2028\U000e0001\ud800")
            == "a\\nb\\tc\\r\\x85\\x7f\\u2028\\U000e0001\\ud800")
    assert terminal_safe("a\nb\tc", keep_newlines=True) == "a\nb\tc"
    assert terminal_safe("val_loss=0.25 [/x] héllo 日本 ✓") == "val_loss=0.25 [/x] héllo 日本 ✓"  # markup is text
    assert terminal_safe(0.5) == "0.5"
    assert not unsafe_characters(terminal_safe(HOSTILE))


def test_worker_output_keeps_colours_and_escapes_the_rest():
    from trainkit._internal.terminal import output_safe

    shown = output_safe("\x1b[31mred\x1b[0m \x1b[2J \x1b]0;t\x07 \u202e \u200f\tend\nplain")
    assert shown == "\x1b[31mred\x1b[0m \\x1b[2J \\x1b]0;t\\x07 \\u202e \u200f\tend\x1b[0m\nplain"


# -- fit()'s display ------------------------------------------------------------------------------


def hostile_fn(config):
    from trainkit.testing.steps import report_step, resume_step

    for step in range(resume_step(), 2):
        if step == 1 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError(f"failed on {HOSTILE}\nsecond line \x1b[2J")
        report_step(step, {NAME: 0.5 + step, "note": VALUE, "step": step, "other": HOSTILE})


def test_fit_returns_its_result_and_prints_no_control_characters(tmp_path, capfd):
    """A real fit(): a metric named with an OSC sequence and a bidi override, a string value with
    ``[/x]`` (rich's MarkupError once made fit() raise after training ended, the Result lost) and
    clear-screen, and a failure whose message holds OSC 8 hyperlinks and bidi isolates."""
    result = trainkit.DataParallelTrainer(
        hostile_fn, train_loop_config={"marker": str(tmp_path / "failed-once")},
        scaling_config=ScalingConfig(num_workers=0),
        run_config=trainkit.RunConfig(name="hostile", storage_path=str(tmp_path), verbose=2,
                                      failure_config=FailureConfig(max_failures=1))).fit()
    assert result.error is None and result.metrics[NAME] == 1.5 and result.metrics["note"] == VALUE
    out, err = capfd.readouterr()
    assert "\\x1b]0;pwn\\x07loss\\u202e=1.5" in err and "note=[/x] \\x1b[2J" in err, err  # shown, escaped
    assert "failed on" in err  # the failure's note
    assert not unsafe_characters(out + err), (out + err)[-3000:]


def test_a_failing_draw_is_a_note_never_an_exception(capsys, monkeypatch):
    shown = display_mod.Display(verbose=2, run_name="r")

    def broken(*args, **kwargs):
        raise RuntimeError("draw \x1b[2J failed")

    monkeypatch.setattr(shown.console, "print", broken)
    shown.report(0, {"loss": 0.5}, None)
    shown.note("a note")
    err = capsys.readouterr().err
    assert "trainkit: could not show the report: RuntimeError: draw \\x1b[2J failed" in err
    assert not unsafe_characters(err)


def test_worker_output_is_never_markup(capsys):
    shown = display_mod.Display(verbose=1, run_name="r")
    shown.worker_output(0, "[/x] [bold]b[/bold] \x1b]0;t\x07 \u202e")
    assert capsys.readouterr().out == "(rank 0) [/x] [bold]b[/bold] \\x1b]0;t\\x07 \\u202e\n"


# -- the commands, on a tampered run directory ----------------------------------------------------


def cli(*args):
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", *args], capture_output=True, timeout=120,
                           env={**os.environ, "COLUMNS": "200"})
    return out.returncode, decoded(out.stdout), decoded(out.stderr)


def clean_fn():
    from trainkit.testing.steps import report_step

    for step in range(3):
        report_step(step, {"step": step, "loss": 1.0 / (step + 1)})


@pytest.fixture(scope="module")
def tampered(tmp_path_factory):
    """A run trainkit wrote, then edited by someone with access to the storage: every string field
    of run_state.json, metrics.jsonl and the checkpoints' manifests holds control sequences, markup
    and bidi overrides; so does its directory's name. A second run's state is unreadable, its error
    naming a hostile key."""
    root = tmp_path_factory.mktemp("runs")
    result = trainkit.DataParallelTrainer(
        clean_fn, scaling_config=ScalingConfig(num_workers=0),
        run_config=trainkit.RunConfig(name="clean", storage_path=str(root), verbose=0,
                                      checkpoint_config=trainkit.CheckpointConfig(checkpoint_score_attribute="loss",
                                                                                  checkpoint_score_order="min"))).fit()
    assert result.checkpoint is not None
    run = root / f"clean{HOSTILE[:40]}\u202e".replace("/", "_").replace("\ud800", "")
    os.rename(result.path, run)
    hostile_metrics = {NAME: 0.5, "note": VALUE, HOSTILE: HOSTILE, "loss": 0.25, "step": 0, "$\\x$": 1.0}
    state = json.loads((run / "run_state.json").read_text())
    state.update(name=f"run{HOSTILE}", error=f"boom {HOSTILE}\n[red]x[/]", backend=f"torch{HOSTILE}",
                 checkpoint_score_attribute=NAME, latest_checkpoint=f"ckpt{HOSTILE}",
                 failures=[{"time": 1.0, "attempt": 0, "message": f"died {HOSTILE}"},
                           {"time": HOSTILE, "attempt": HOSTILE, "message": HOSTILE}])
    state["checkpoints"].append({"name": f"../ckpt{HOSTILE}", "index": 9, "attempt": 0, "score": 0.1})
    (run / "run_state.json").write_text(json.dumps(state))
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for i, line in enumerate(lines):
        line["metrics"] = {**hostile_metrics, NAME: 0.5 + i, "step": i, "$\\x$": float(i)}
    lines[-1]["checkpoint"] = f"ckpt{HOSTILE}"
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    for manifest in run.glob("*/.manifest.json"):
        data = json.loads(manifest.read_text())
        data["metrics"] = hostile_metrics
        manifest.write_text(json.dumps(data))
    broken = root / "broken"
    broken.mkdir()
    (broken / "run_state.json").write_text(json.dumps({"name": "broken", f"key{HOSTILE}": 1}))
    return root, run


def test_runs_and_show_print_a_tampered_run_escaped(tampered):
    root, run = tampered
    for args in (("runs", str(root)), ("show", str(run)), ("show", str(run), "--metric", NAME),
                 ("show", str(root / "broken")), ("runs", str(root / f"missing{HOSTILE[:30]}"))):
        code, out, err = cli(*args)
        assert "Traceback" not in err, (args, err)
        assert not unsafe_characters(out + err), (args, out, err)
        if args[0] == "show" and args[1] == str(run):
            assert code == 0 and "\\x1b]0;pwn\\x07loss\\u202e" in out and "[/x]" in out and "[red]x[/]" in out, out


def test_plot_of_a_tampered_run_draws_and_prints_escaped(tampered, tmp_path):
    pytest.importorskip("matplotlib")
    _, run = tampered
    png = tmp_path / "m.png"
    absent = f"absent{HOSTILE}".replace("\ud800", "")  # an argument cannot hold a lone surrogate
    for args in (("--metric", NAME, "--metric", "$\\x$", "--metric", "loss"), ("--metric", absent)):
        code, out, err = cli("plot", str(run), *args, "-o", str(png))
        assert "Traceback" not in err, (args, err)
        assert not unsafe_characters(out + err), (args, out, err)
    assert png.stat().st_size > 0


def printing_fn():
    print(f"rank says {HYPERLINK} [/x] \x1b]0;title\x07 \u202e", flush=True)
    trainkit.report({NAME: 0.5, "note": VALUE})


def test_a_ray_fit_relays_worker_output_and_metrics_escaped(ray_cluster, run_config, capfd):
    """Two ranks on Ray: each prints control sequences and markup and reports the hostile metric;
    what the driver shows of both holds no control character, and fit() returns its Result."""
    result = trainkit.DataParallelTrainer(printing_fn, scaling_config=ScalingConfig(num_workers=2),
                                          run_config=run_config(verbose=2)).fit()
    assert result.error is None and result.metrics["note"] == VALUE
    out, err = capfd.readouterr()
    assert "(rank 0) rank says \\x1b]8;;https://evil.example\\x1b\\click" in out, out
    assert "[/x] \\x1b]0;title\\x07 \\u202e" in out and "\\x1b]0;pwn\\x07loss\\u202e=0.5" in err, (out, err)
    assert not unsafe_characters(out + err), (out + err)[-3000:]
