"""How the screen's rows are dealt among the panes (tui/render/room.py): what each needs, up to a share, then the rest."""

from ranktop.tui.render.room import ANY, Want, share, total


def test_panes_that_fit_get_exactly_their_rows_and_nothing_is_given_twice():
    wants = [Want("main", 12, 9, 0.6), Want("collectives", 7, 4, 0.35), Want("memory", 7, 4, 0.3), Want("gpus", 2, 3, 0.25)]
    heights = share(30, wants)
    assert heights == {"main": 12, "collectives": 7, "memory": 7, "gpus": 2}
    assert total(wants) == 28


def test_a_short_pane_gives_its_rows_to_the_pane_that_scrolls():
    """The bug it answers: 4 straggler rows then 12 blank ones, while the memory pane below showed 3 of 4 ranks."""
    heights = share(20, [Want("main", 6, 9, 0.6), Want("memory", 7, 4, 0.3)])
    assert heights == {"main": 6, "memory": 7}


def test_a_pane_as_tall_as_it_is_given_takes_what_the_others_leave():
    heights = share(45, [Want("main", ANY, 9, 0.6), Want("collectives", 10, 4, 0.35)])
    assert heights == {"main": 35, "collectives": 10}


def test_when_everyone_wants_more_each_gets_its_share_and_the_first_the_rest():
    heights = share(40, [Want("main", 200, 9, 0.6), Want("collectives", 100, 4, 0.3)])
    assert heights == {"main": 28, "collectives": 12}
    assert sum(heights.values()) == 40


def test_a_tiny_room_goes_to_the_most_important_pane_first():
    heights = share(10, [Want("main", 200, 9, 0.6), Want("collectives", 100, 4, 0.3)])
    assert heights == {"main": 9, "collectives": 1}
    assert share(-3, [Want("main", 5, 2, 0.5)]) == {"main": 0}
