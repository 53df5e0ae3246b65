"""What the driver prints off a terminal: plain lines, at least every PLAIN_EVERY_S while reports arrive."""

import logging

import pytest

from trainkit._internal import display as display_mod


@pytest.mark.parametrize(("every_s", "expected"), [(3600.0, ["report 1"]), (0.0, ["report 0", "report 1", "report 2"])])
def test_plain_lines_for_checkpoints_and_then_periodically(monkeypatch, capsys, every_s, expected):
    monkeypatch.setattr(display_mod, "PLAIN_EVERY_S", every_s)
    shown = display_mod.Display(verbose=1, run_name="r")
    for index, checkpoint in enumerate([None, "checkpoint_000001", None]):
        shown.report(index, {"loss": 0.5}, checkpoint)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("  ")[0].removeprefix("trainkit: ") for line in lines] == expected


def test_quiet_prints_nothing(capsys):
    shown = display_mod.Display(verbose=0, run_name="r")
    shown.report(0, {"loss": 0.5}, "checkpoint_000000")
    shown.note("something")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("verbose", "expected"), [
    (1, ["(rank 0) warning: x", "(rank 1) own line", "(rank 0) warning: x"]),
    (2, ["(rank 0) warning: x", "(rank 1) warning: x", "(rank 1) own line", "(rank 0) warning: x"])])
def test_a_line_every_rank_prints_is_shown_once(capsys, verbose, expected):
    shown = display_mod.Display(verbose=verbose, run_name="r")
    shown.worker_output(0, "warning: x")
    shown.worker_output(1, "warning: x\nown line")
    shown.worker_output(0, "warning: x")  # the same rank again: its own output, shown
    assert capsys.readouterr().out.splitlines() == expected


def test_the_status_clock_ticks_while_nothing_arrives():
    import io

    from rich.console import Console

    shown = display_mod.Display(verbose=1, run_name="r")
    shown.console = Console(file=io.StringIO(), force_terminal=True, width=120)
    shown.start()
    try:
        shown.update(attempt=0, workers=2)
        shown._started -= 7  # 7 s of waiting with no update
        assert str(shown._live.get_renderable()).endswith("  7s")
    finally:
        shown.stop()


def test_on_a_terminal_rank0_progress_redraws_under_the_status_and_report_lines_stay():
    import io

    from rich.console import Console

    def status_text():
        out = Console(file=io.StringIO(), width=120)
        out.print(shown._status())
        return out.file.getvalue()

    shown = display_mod.Display(verbose=1, run_name="r")
    screen = io.StringIO()
    shown.console = Console(file=screen, force_terminal=True, width=120, highlight=False)
    shown.start()
    shown.worker_output(0, "epoch:  50%|#####", progress=True)
    shown.worker_output(1, "epoch:  40%|####", progress=True)  # another rank's bar: not shown
    assert "(rank 0) epoch:  50%|#####" in status_text() and "40%" not in status_text()
    shown.worker_output(0, "epoch: 100%|##########")  # the finished bar: a line, the redrawn one gone
    assert "epoch" not in status_text()
    shown.report(0, {"loss": 0.5}, "checkpoint_000000")
    shown.stop()
    assert "(rank 0) epoch: 100%|##########" in screen.getvalue()
    assert "trainkit: report 0  loss=0.5  [checkpoint_000000]" in screen.getvalue()  # stays after the run


def test_notes_and_warnings_also_go_to_the_trainkit_logger(caplog):
    from trainkit._internal.display import Display, warn
    from trainkit.errors import TrainkitWarning

    caplog.set_level(logging.INFO, logger="trainkit")
    Display(verbose=0, run_name="r").note("could not update run_state.json")
    Display(verbose=0, run_name="r").note("validated checkpoint_000001", logging.INFO)
    with pytest.warns(TrainkitWarning, match="lock"):
        warn("could not release the lock")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("trainkit", logging.WARNING, "could not update run_state.json"),
        ("trainkit", logging.INFO, "validated checkpoint_000001"),
        ("trainkit", logging.WARNING, "could not release the lock")]


def test_trainkit_warnings_fail_this_suite_unless_expected():
    """pyproject's filterwarnings turns TrainkitWarning into an error (a RuntimeWarning's subclass,
    so ``pytest.warns(RuntimeWarning)`` keeps matching)."""
    from trainkit._internal.display import warn
    from trainkit.errors import TrainkitWarning

    assert issubclass(TrainkitWarning, RuntimeWarning)
    with pytest.raises(TrainkitWarning):
        warn("unexpected")


def test_what_the_run_prints_waits_while_a_debugger_has_the_terminal(capsys):
    shown = display_mod.Display(verbose=1, run_name="r")
    with shown.handed_over():
        shown.worker_output(1, "printed meanwhile")
        shown.note("noted meanwhile")
        assert capsys.readouterr() == ("", "")
    captured = capsys.readouterr()
    assert captured.out == "(rank 1) printed meanwhile\n" and captured.err == "trainkit: noted meanwhile\n"
