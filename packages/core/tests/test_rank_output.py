"""A worker's stdout/stderr: whole lines to the driver; a line redrawn with \r as its latest state."""

import io

from trainkit._internal.worker.rank_output import RankOutput


def test_lines_whole_and_redrawn_lines_as_their_latest_state():
    sent = []
    out = RankOutput(io.StringIO(), rank=3, put=sent.append)
    out.write("a\nb")
    out.write("c\n")
    for percent in (10, 50):  # what tqdm writes on each refresh
        out.write(f"\rbar {percent}%")
        out.flush()
    out.write("\rbar 100%\n")
    out.write("windows line\r\n")
    out.write("no newline")
    out.flush()
    assert [(o.rank, o.text, o.progress) for o in sent] == [
        (3, "a", False), (3, "bc", False), (3, "bar 10%", True), (3, "bar 50%", True), (3, "bar 100%", False),
        (3, "windows line", False), (3, "no newline", False)]
