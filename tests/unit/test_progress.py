"""The one progress display (slurmforge.progress): what a line says of where an operation
is, fitted to the terminal; drawn in place on a terminal, nothing at all elsewhere."""

from __future__ import annotations

import io

import pytest

from slurmforge.package_data import playbooks
from slurmforge.progress import Progress, ProgressLine
from slurmforge.rollout import CLUSTER_PLAYBOOK, RolloutResult, _apply, count_plays

pytestmark = pytest.mark.unit


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_step_says_its_play_of_how_many_its_task_and_host_and_gives_way_in_a_narrow_terminal() -> None:
    step = Progress("Controller - slurmctld", "Install slurmctld and its plugins", hosts_done=2, tasks_done=41,
                    host="dev-controller-backup", plays_done=6, plays_total=20)
    full = ("play 7/20 Controller - slurmctld › task 41: Install slurmctld and its plugins · dev-controller-backup, "
            "2 done")
    assert step.text() == full and step.text(len(full)) == full
    assert step.text(90) == "play 7/20 › task 41: Install slurmctld and its plugins · dev-controller-backup, 2 done"
    assert step.text(80) == "play 7/20 › task 41: Install slurmctld and its plugins · dev-controller-backup"
    assert step.text(60) == "play 7/20 › task 41: Install slurmc… · dev-controller-backup"  # 60 characters
    assert Progress(task="test_munge", tasks_done=3, tasks_total=27).text() == "3/27: test_munge"
    assert Progress(task="apt-get update").text() == "apt-get update"


def test_a_line_is_drawn_in_place_on_a_terminal_only() -> None:
    piped, out = io.StringIO(), io.StringIO()
    line = ProgressLine("roll out (Ansible)", piped, tick=0, out=out)
    line.update(Progress("Login nodes", "sackd", tasks_done=3))
    line.say("a note")
    line.done()
    assert (piped.getvalue(), out.getvalue()) == ("", "a note\n")  # a note is a result; the progress is not
    shown = Terminal()
    line = ProgressLine("roll out (Ansible)", shown, tick=0, out=shown)  # stdout and stderr: one terminal
    line.update(Progress("Login nodes", "sackd", tasks_done=3))
    line.say("a note")
    line.done()
    drawn = shown.getvalue()
    assert drawn.startswith("\rroll out (0 s)\rroll out: play Login nodes › task 3: sackd (0 s)")
    assert "\r" + " " * len("roll out: play Login nodes › task 3: sackd (0 s)") + "\ra note\n" in drawn
    assert drawn.endswith(" \r") and "\n" not in drawn.split("a note\n")[1]  # cleared, not left behind
    shown, out = Terminal(), io.StringIO()  # `up | tee`: the progress on the terminal, the results in the pipe
    line = ProgressLine("roll out (Ansible)", shown, tick=0, out=out)
    line.update(Progress("Login nodes", "sackd", tasks_done=3))
    line.say("a note")
    line.done()
    assert out.getvalue() == "a note\n" and "a note" not in shown.getvalue()
    assert shown.getvalue().count("roll out: play Login nodes › task 3: sackd (0 s)") == 2  # drawn again below it


def test_the_rollout_counts_plays_and_follows_the_host() -> None:
    plays = count_plays(playbooks() / CLUSTER_PLAYBOOK)
    text = (playbooks() / CLUSTER_PLAYBOOK).read_text()
    imported = text.count("import_playbook: rollout_mark.yml") + text.count("import_playbook: slurm_takeover.yml")
    assert plays == text.count("\n  hosts: ") + imported and plays > 10  # each imported file: one play
    progress, result = Progress(plays_total=plays), RolloutResult(ok=False)
    for kind, data in (("playbook_on_play_start", {"play": "one"}), ("playbook_on_play_start", {"play": "two"}),
                       ("playbook_on_task_start", {"task": "t"}), ("runner_on_start", {"host": "a"}),
                       ("runner_on_ok", {"host": "a"}), ("runner_on_start", {"host": "b"})):
        _apply({"event": kind, "event_data": data}, progress, result)
    assert (progress.plays_done, progress.play, progress.tasks_done, progress.hosts_done, progress.host) == (
        1, "two", 1, 1, "b")
