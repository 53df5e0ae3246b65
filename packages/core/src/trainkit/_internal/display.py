"""What the driver prints: worker output prefixed by rank (a line every rank prints, once), a live
status line, a final summary.

A plain line per committed checkpoint, and at least every ``PLAIN_EVERY_S`` while reports arrive
(every report at verbose=2), stays on screen; on a terminal the status line below them redraws in
place, with rank 0's progress bar (a line redrawn with ``\r``, e.g. tqdm's) under it. Elsewhere a
progress bar shows only as its finished line.
Verbosity: ``RunConfig.verbose`` or ``$TRAINKIT_VERBOSE``.

Data is shown escaped (``terminal.terminal_safe``): a metric, an error message or a name never
drives the terminal nor is read as rich markup, and a failure to draw is at most a note, never an
exception out of ``fit()``.

Notes and warnings also go to the ``"trainkit"`` logger once logging is configured (a handler
exists), so they reach log files and aggregators; unconfigured, each shows once, here.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterator

from trainkit._internal.terminal import output_safe, terminal_safe
from trainkit.errors import TrainkitWarning

if TYPE_CHECKING:  # rich is imported where a display draws: workers import this module for warn()
    from rich.console import Console
    from rich.live import Live

PLAIN_EVERY_S = 30.0
_console_ranks: frozenset[int] | None = None  # `trainkit launch --local-ranks-filter`: the ranks shown


@contextlib.contextmanager
def console_ranks(ranks: frozenset[int] | None) -> Iterator[None]:
    """While inside, the console shows only ``ranks``' output (None: every rank's); the run's logs
    keep every rank's."""
    global _console_ranks
    previous, _console_ranks = _console_ranks, ranks
    try:
        yield
    finally:
        _console_ranks = previous

logger = logging.getLogger("trainkit")


def log(level: int, message: str) -> None:
    """To the ``"trainkit"`` logger where logging is configured (else Python's last-resort handler
    would print a second copy of what trainkit shows). Shown escaped: a log file may be read on a
    terminal too."""
    if logger.hasHandlers():
        logger.log(level, terminal_safe(message, keep_newlines=True))


def warn(message: str, stacklevel: int = 2) -> None:
    """A ``TrainkitWarning`` (a ``RuntimeWarning``), also logged; shown escaped."""
    message = terminal_safe(message, keep_newlines=True)
    warnings.warn(message, TrainkitWarning, stacklevel=stacklevel + 1)
    log(logging.WARNING, message)


def resolve_verbosity(verbose: int | None) -> int:
    if verbose is not None:
        return verbose
    try:
        return int(os.environ.get("TRAINKIT_VERBOSE", "1"))
    except ValueError:
        return 1


def format_metrics(metrics: dict[str, Any] | None, limit: int = 6) -> str:
    """``loss=0.25 phase=train``: names and values shown escaped (``terminal_safe``)."""
    shown = [f"{terminal_safe(key)}={value:.4g}" if isinstance(value, float) else
             f"{terminal_safe(key)}={terminal_safe(value)}"
             for key, value in (metrics or {}).items() if isinstance(value, (float, int, str, bool))]
    return " ".join(shown[:limit])


def emit(console: Console, *renderables: Any) -> None:
    """Print as rich draws it on a terminal; elsewhere (a file, a pipe) without the padding rich
    adds to table cells at line ends."""
    if console.is_terminal:
        console.print(*renderables)
        return
    with console.capture() as captured:
        console.print(*renderables)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def _never_fails(method: Callable) -> Callable:
    """Drawing never fails a run: an exception while showing something becomes a one-line note."""
    @functools.wraps(method)
    def drawn(self: "Display", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            _could_not_show(method.__name__, exc)
            return None
    return drawn


def _could_not_show(what: str, exc: BaseException) -> None:
    line = terminal_safe(f"trainkit: could not show the {what}: {type(exc).__name__}: {exc}".splitlines()[0])
    log(logging.WARNING, line)
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: S110 - stderr closed or unencodable: nothing left to show it on
        pass


def _to_terminal(method: Callable) -> Callable:
    """A Display method that prints: while the terminal is handed over, it runs once it is back.
    It never raises (``_never_fails``)."""
    guarded = _never_fails(method)

    @functools.wraps(method)
    def shown(self: "Display", *args: Any, **kwargs: Any) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(functools.partial(guarded, self, *args, **kwargs))
            else:
                guarded(self, *args, **kwargs)
    return shown


class Display:
    def __init__(self, verbose: int | None, run_name: str):
        from rich.console import Console

        self.verbose = resolve_verbosity(verbose)
        self.run_name = run_name
        # emoji=False: ":smile:" in a metric is text, as its "[/x]" is
        self.console = Console(stderr=True, highlight=False, emoji=False)
        if not self.console.is_terminal:  # plain lines: never wrap at an imagined 80 columns
            self.console = Console(stderr=True, highlight=False, emoji=False, width=10_000)
        self._live: Live | None = None
        self._live_wanted = False  # between start() and stop()
        self._lock = threading.RLock()  # the relay's thread hands the terminal over (handed_over)
        self._held: list[Callable[[], None]] | None = None  # while handed over: what prints once it is back
        self._first_rank: dict[str, int] = {}  # worker output line -> the rank that printed it first
        self._started = self._last_line = time.monotonic()
        self._progress: str | None = None  # rank 0's progress bar, as last drawn
        self.fields: dict[str, Any] = {"attempt": 0, "workers": 0, "reports": 0, "metrics": None, "checkpoint": None}

    @_never_fails
    def start(self) -> None:
        with self._lock:
            self._live_wanted = self.verbose >= 1 and self.console.is_terminal
            if self._held is None:
                self._start_live()

    @_never_fails
    def stop(self) -> None:
        with self._lock:
            self._live_wanted = False
            self._stop_live()

    @contextlib.contextmanager
    def handed_over(self) -> Iterator[None]:
        """The terminal is a debugger's (``debug_relay``): the status line stops and what the run
        prints meanwhile waits; both come back after."""
        with self._lock:
            self._stop_live()
            self._held = []
        try:
            yield
        finally:
            with self._lock:
                held, self._held = self._held, None
                self._start_live()
                for show in held:
                    show()

    def _start_live(self) -> None:
        if self._live_wanted and self._live is None:
            from rich.live import Live

            # get_renderable: each refresh redraws the status, so its clock ticks while nothing arrives
            self._live = Live(console=self.console, get_renderable=self._status, refresh_per_second=4, transient=True)
            self._live.start()

    def _status(self) -> Any:
        """The status line (Live's refresh thread draws it): never raises."""
        from rich.console import Group
        from rich.text import Text

        try:
            f = self.fields
            text = Text.assemble(("trainkit ", "bold cyan"), (terminal_safe(self.run_name), "bold"),
                                 f"  attempt {f['attempt']}  workers {f['workers']}  reports {f['reports']}")
            if f["checkpoint"]:
                text.append(f"  ckpt {terminal_safe(f['checkpoint'])}")
            if f["metrics"]:
                text.append(f"  {format_metrics(f['metrics'])}", style="green")
            text.append(f"  {time.monotonic() - self._started:.0f}s", style="dim")
            return Group(text, Text.from_ansi(f"(rank 0) {output_safe(self._progress)}")) if self._progress else text
        except Exception as exc:
            return Text(terminal_safe(f"trainkit: could not show the status: {type(exc).__name__}"))

    @_never_fails
    def update(self, **fields: Any) -> None:
        with self._lock:
            self.fields.update(fields)
            if self._live is not None:
                self._live.refresh()

    @_to_terminal
    def report(self, index: int, metrics: dict[str, Any], checkpoint: str | None) -> None:
        self.update(reports=self.fields["reports"] + 1, metrics=metrics, checkpoint=checkpoint or self.fields["checkpoint"])
        now = time.monotonic()
        due = checkpoint or now - self._last_line >= PLAIN_EVERY_S
        if self.verbose >= 2 or (self.verbose >= 1 and due):
            suffix = f"  [{terminal_safe(checkpoint)}]" if checkpoint else ""
            self.console.print(f"trainkit: report {index}  {format_metrics(metrics)}{suffix}", markup=False)
            self._last_line = now

    @_to_terminal
    def note(self, message: str, level: int = logging.WARNING) -> None:
        """A line about the run (``level=logging.INFO`` for one that is no warning), shown escaped
        (its lines kept: a worker's traceback)."""
        message = terminal_safe(message, keep_newlines=True)
        log(level, message)
        if self.verbose >= 1:
            self.console.print(f"trainkit: {message}", markup=False, style="yellow")

    @_to_terminal
    def worker_output(self, rank: int, text: str, progress: bool = False) -> None:
        """Prints ``text`` prefixed by rank; below verbose=2, a line another rank already printed
        (the same warning from every worker) is shown once. ``progress``: the latest state of a
        line being redrawn, shown (rank 0's, on a terminal) under the status line.
        The user's program's own output: never read as markup; colours kept, other control
        characters escaped (``terminal.output_safe``)."""
        if _console_ranks is not None and rank not in _console_ranks:
            return
        if progress:
            if rank == 0 and self._live is not None:
                self._progress = text
                self._live.update(self._status())
            return
        if rank == 0 and self._progress is not None:
            self._progress = None  # its finished line follows
            if self._live is not None:
                self._live.update(self._status())
        lines = text.split("\n")
        if self.verbose < 2:
            if len(self._first_rank) > 10_000:
                self._first_rank.clear()
            lines = [line for line in lines if self._first_rank.setdefault(line, rank) == rank]
            if not lines:
                return
        prefixed = output_safe("\n".join(f"(rank {rank}) {line}" for line in lines))
        if self._live is not None:
            from rich.text import Text

            self._live.console.print(Text.from_ansi(prefixed), highlight=False)  # its colours as rich styles
        else:
            sys.stdout.write(prefixed + "\n")
            sys.stdout.flush()

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    @_to_terminal
    def summary(self, result: Any, attempts: int, reports: int) -> None:
        """The final table (``attempts`` and ``reports`` of the whole run, as ``trainkit show``
        counts them); with a ``checkpoint_score_attribute``, also the best checkpoint (the one
        ``result.get_best_checkpoint()`` and ``trainkit show`` name)."""
        if self.verbose < 1:
            return
        from rich.table import Table
        from rich.text import Text

        ended = ("failed", "red") if result.error else ("finished", "green")
        table = Table(show_header=False, box=None, pad_edge=False, title_justify="left",
                      title=Text.assemble(f"trainkit run {terminal_safe(self.run_name)}: ", ended))

        def row(label: str, value: Any) -> None:  # a Text: data is never read as markup
            table.add_row(label, Text(terminal_safe(value)))

        row("path", result.path)
        row("attempts", attempts)
        row("reports", reports)
        if result.metrics:
            row("metrics", format_metrics(result.metrics, limit=10))
        if result.checkpoint:
            row("checkpoint", result.checkpoint.path)
        metric = result.score_attribute
        if metric and (best := result.get_best_checkpoint()):
            scores = {metric: next(m[metric] for c, m in result.best_checkpoints if c == best)}
            row("best", f"{best.path}  ({format_metrics(scores)})")
        if result.error is not None:
            row("error", f"{type(result.error).__name__}: {(str(result.error).splitlines() or [''])[0]}")
        row("time", f"{time.monotonic() - self._started:.1f} s")
        emit(self.console, table)
