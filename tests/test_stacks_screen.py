"""The stacks key and screens, and the stalled status on screen: hand-built snapshots and replies, the pilot at the keys."""

import asyncio

from test_app_render import FakeController, job_snapshot, rank_row, text_of
from test_stacks import ddp_rank, hung_rank, reply

from ranktop.tui.app import READ_ONLY, RanktopApp
from ranktop.watch.model.answers import Answer
from ranktop.watch.statuses import STALLED
from ranktop.probe import stacks as probe_stacks
from ranktop.tui.screens.stacks import RankStackScreen, StacksScreen
from ranktop.tui.panes.status import StatusLine
from ranktop.tui.panes.stragglers import COLUMNS, StragglerTable, cells


def hung_snapshot():
    rows = [rank_row(n) for n in range(4)]
    for n in range(4):
        phase = "forward" if n == 2 else "backward"
        rows[n] = rank_row(n, status=STALLED)
        rows[n] = type(rows[n])(**{**vars(rows[n]), "stalled_s": 14.0, "stalled_phase": phase, "stalled_step": 30})
    diagnosis = "ranks 0-1,3 stalled in backward at step 30 for 14s, waiting for rank 2: in forward at step 30"
    return job_snapshot(rows, stragglers=[2, 0, 1, 3], waiting_for=[2], diagnosis=diagnosis)


class RepliesSource:
    """A snapshot, and every rank's answer to each command (what WatchSession.replies_to gives): as the probe
    answers (probe/stacks.py), only a fingerprint when the command asked for one, else the stacks."""

    def __init__(self, snapshot, answering=(0, 1, 2, 3), controller=None):
        self.current = snapshot
        self.answering = answering
        self.controller = controller

    def snapshot(self):
        return self.current

    def replies_to(self, command_id):
        args, targets = {}, None
        if self.controller is not None:  # what was asked, by the FakeController's ids ("cmd-N")
            _, args, targets = self.controller.sent[int(command_id.split("-")[1]) - 1]
        out = []
        for r in self.answering:
            if targets is not None and r not in targets:
                continue
            full = reply(hung_rank() if r == 2 else ddp_rank(), "forward" if r == 2 else "backward")
            state = full.pop("state")
            out.append(Answer(command_id, "stacks", r, True, probe_stacks.answer(full, state, bool((args or {}).get("fingerprint"))), 0.01))
        return out


def stacks_text(screen):
    return text_of(screen.query_one("#stacks-summary")) + "\n" + text_of(screen.query_one("#stacks-groups"))


def run(source, scenario, controller=None, size=(120, 36)):
    async def main():
        app = RanktopApp(source, controller if controller is not None else FakeController(), refresh_hz=4.0)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await scenario(app, pilot)

    asyncio.run(main())


def test_a_stalled_rank_shows_how_long_and_where_and_the_diagnosis_is_on_the_status_line():
    snap = hung_snapshot()
    shown = dict(zip((key for key, _, _ in COLUMNS), cells(snap.ranks[2])))
    status, culprit = shown["status"].plain, shown["culprit"].plain
    assert status == "stalled 14s" and culprit == "forward"

    async def scenario(app, pilot):
        assert "waiting for rank 2" in text_of(app.query_one(StatusLine))
        table = app.query_one(StragglerTable)
        assert int(table.ordered_rows[0].key.value) == 2

    run(RepliesSource(snap), scenario)


def test_the_stacks_key_groups_the_ranks_and_opens_a_rank_s_full_stacks():
    controller = FakeController()

    async def scenario(app, pilot):
        await pilot.press("t")
        await pilot.pause(0.3)
        # fingerprints from every rank, then the stacks of one rank per distinct fingerprint
        assert controller.sent == [("stacks", {"fingerprint": True}, None), ("stacks", None, [0, 2])]
        screen = app.screen
        assert isinstance(screen, StacksScreen)
        shown = stacks_text(screen)
        assert "4/4 ranks answered" in shown
        assert "ranks 0-1,3: loss.backward at train.py:318" in shown
        assert "rank 2: time.sleep at faults.py:80" in shown
        await pilot.press("down", "enter")  # the second group: rank 2 alone
        await pilot.pause()
        assert isinstance(app.screen, RankStackScreen) and app.screen.ranks == (2,)
        body = str(app.screen.query_one("#rank-stack-text").render())
        assert "main thread 'MainThread'" in body and 'File "/job/faults.py", line 80, in hang' in body
        await pilot.press("escape")
        await pilot.press("up", "enter", "right")
        assert isinstance(app.screen, RankStackScreen) and app.screen.ranks == (0, 1, 3)
        assert app.screen.index == 1
        await pilot.press("escape", "escape")
        assert not isinstance(app.screen, (StacksScreen, RankStackScreen))

    run(RepliesSource(hung_snapshot(), controller=controller), scenario, controller)


def test_ranks_that_do_not_answer_are_named_unresponsive():
    async def scenario(app, pilot):
        await pilot.press("t")
        screen = app.screen
        shown = stacks_text(screen)
        assert "3/4 ranks answered" in shown and "waiting for rank 2" in shown
        screen.timeout_s = 0.5  # instead of waiting the full ANSWER_TIMEOUT_S
        await pilot.pause(0.8)
        shown = stacks_text(screen)
        assert "3/4 ranks answered" in shown and "rank 2: no answer within 0.5s (unresponsive)" in shown

    run(RepliesSource(hung_snapshot(), answering=(0, 1, 3)), scenario)


def test_without_the_secret_the_stacks_key_says_read_only():
    class ReadOnly:
        available = False

    async def scenario(app, pilot):
        await pilot.press("t")
        await pilot.pause()
        assert not isinstance(app.screen, StacksScreen)
        assert READ_ONLY in text_of(app.query_one(StatusLine))

    run(RepliesSource(hung_snapshot()), scenario, ReadOnly())
