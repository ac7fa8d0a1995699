"""Every key ranktop answers to, in one table.

The App's ``BINDINGS`` and the help screen both read :data:`KEYS`, so the
footer, the help screen and the behaviour cannot drift apart. The ``tooltip``
of each binding is the longer text the help screen shows.
"""

from __future__ import annotations

from textual.binding import Binding

from ranktop.wire.capture import DEFAULT_STEPS

KEYS: tuple[Binding, ...] = (
    Binding("q", "quit", "Quit", id="quit", tooltip="Leave ranktop. The job is not touched."),
    Binding(
        "s",
        "cycle_sort",
        "Sort",
        id="sort",
        tooltip="Sort the bars by rank, by straggler score (most suspicious first), or by step time.",
    ),
    Binding(
        "p",
        "ping",
        "Ping",
        id="ping",
        tooltip="Ping every rank: who answers, and the round trip time. Needs the job secret.",
    ),
    Binding(
        "t",
        "stacks",
        "Stacks",
        id="stacks",
        tooltip="Ask every rank for its Python stacks (all threads), grouped by identical main-thread stack; "
        "answers even while the job hangs. Enter on a group shows a rank's full stacks. Needs the job secret.",
    ),
    Binding(
        "P",
        "capture('trace')",
        "Profile",
        id="capture",
        tooltip=f"Take a torch.profiler trace of every rank over {DEFAULT_STEPS} steps, all starting at the same step: per-rank "
        "progress, then where the files are (Perfetto, TensorBoard, HTA) and each rank's top ops and compute / comm / "
        "idle shares. One capture at a time per job (ranktop capture JOB headless). Needs the job secret.",
    ),
    Binding(
        "M",
        "capture('memory')",
        "Mem snapshot",
        id="memsnap",
        show=False,
        tooltip=f"Record the CUDA allocator's history over {DEFAULT_STEPS} steps on every rank and dump a snapshot per rank for "
        "pytorch.org/memory_viz (ranktop memsnap JOB headless). Needs CUDA on the ranks and the job secret.",
    ),
    Binding(
        "c",
        "toggle_collectives",
        "Collectives",
        id="collectives",
        tooltip="Show or hide the collectives panel: calls/s, bytes/s, latency, bandwidths and the alpha-beta fit per op.",
    ),
    Binding(
        "m",
        "toggle_memory",
        "Memory",
        id="memory",
        tooltip="Show or hide the memory and throughput pane: per rank RSS or CUDA memory against capacity, its "
        "history, memory creep (a steady climb: a leak), samples/s, tokens/s, TFLOP/s and MFU.",
    ),
    Binding(
        "g",
        "toggle_gpus",
        "GPUs",
        id="gpus",
        tooltip="Show or hide the GPU gauges (NVML): utilisation, memory, power, temperature, clocks, PCIe and "
        "throttling, per rank's GPU grouped by host; the rank selected in the straggler table is highlighted.",
    ),
    Binding(
        "v",
        "cycle_view",
        "View",
        id="view",
        tooltip="Bars (a stacked bar per rank) or the job overview: the distribution of the ranks' slowdown and the rank "
        "map, a cell per rank (or per node when they do not fit) grouped by node. Automatic: bars while every rank fits.",
    ),
    Binding(
        "S",
        "toggle_map_grouping",
        "Stages",
        id="map.grouping",
        show=False,
        tooltip="Group the rank map by pipeline stage instead of by node (on a job whose parallel layout is known; "
        "docs/parallelism.md), and back.",
    ),
    Binding(
        "H",
        "history",
        "History",
        id="history",
        tooltip="The job's step time over the last minutes (median and slowest rank) and the selected rank's phases, "
        "with straggler and stall episodes marked: who was slow, in which phase, since when, at what cost.",
    ),
    Binding(
        "n",
        "network",
        "Network",
        id="network",
        show=False,  # (in the help; the verdict line names a slow link itself)
        tooltip="Which node's network is slow, and every link between the job's nodes as its relays measured it "
        "(a node x node table of rates, or a line per node when they do not fit across).",
    ),
    Binding(
        "space",
        "toggle_pause",
        "Pause",
        id="pause",
        tooltip="Freeze the screen to read it. Telemetry keeps arriving and shows when you resume.",
    ),
    Binding(
        "tab",
        "app.focus_next",
        "Next pane",
        id="focus",
        show=False,
        tooltip="Move between the bars, the straggler table and the memory and GPU panes; arrows and PgUp/PgDn scroll them.",
    ),
    Binding("question_mark,f1", "help", "Help", key_display="?", id="help", tooltip="Show this screen."),
)

#: Keys of the rank map (the job overview), while it has focus; enter drills down.
MAP_KEYS: tuple[Binding, ...] = (
    Binding("left,h", "move(-1, 0)", "Left", key_display="← h", id="map.left", show=False, tooltip="The previous cell."),
    Binding("right,l", "move(1, 0)", "Right", key_display="→ l", id="map.right", show=False, tooltip="The next cell."),
    Binding("up,k", "move(0, -1)", "Up", key_display="↑ k", id="map.up", show=False, tooltip="The cell a line up."),
    Binding("down,j", "move(0, 1)", "Down", key_display="↓ j", id="map.down", show=False, tooltip="The cell a line down."),
    Binding(
        "enter",
        "open",
        "Open",
        id="map.open",
        tooltip="Drill down: a node cell shows its ranks, a rank cell that rank's detail (phases, history, collectives, "
        "memory, GPU). On the straggler table, enter opens the rank's detail too.",
    ),
    Binding(
        "w", "worst", "Worst", id="map.worst", tooltip="Put the cursor back on the worst cell; it follows the worst rank until you move it."
    ),
)

#: Keys of a node's ranks and of a rank's detail.
DRILL_KEYS: tuple[Binding, ...] = (
    Binding("escape,backspace", "close", "Back", key_display="esc", id="drill.close", tooltip="Back to where you came from."),
    Binding("enter", "open", "Rank detail", id="drill.open", show=False, tooltip="On a node's ranks: the highlighted rank's detail."),
    Binding(
        "left_square_bracket",
        "other(-1)",
        "Previous",
        key_display="[",
        id="drill.previous",
        tooltip="The previous rank (in a rank's detail) or node (in a node's ranks).",
    ),
    Binding(
        "right_square_bracket",
        "other(1)",
        "Next",
        key_display="]",
        id="drill.next",
        tooltip="The next rank (in a rank's detail) or node (in a node's ranks).",
    ),
)

#: Keys of ``ranktop replay`` (on top of the main keys; space pauses the playback itself).
REPLAY_KEYS: tuple[Binding, ...] = (
    # Not the arrows: they move the cursor of the rank map and the tables, in a replay as live.
    Binding("comma", "seek(-10)", "-10s", key_display=",", id="replay.back", tooltip="Replay: back 10 seconds."),
    Binding("full_stop", "seek(10)", "+10s", key_display=".", id="replay.forward", tooltip="Replay: forward 10 seconds."),
    Binding("less_than_sign", "seek(-60)", "-1min", key_display="<", id="replay.back_minute", tooltip="Replay: back one minute."),
    Binding("greater_than_sign", "seek(60)", "+1min", key_display=">", id="replay.forward_minute", tooltip="Replay: forward one minute."),
    Binding(
        "G", "goto", "Go to", id="replay.goto", tooltip="Replay: jump to a time (seconds, M:SS or H:MM:SS from the start; -S from the end)."
    ),
    Binding("plus,equals_sign", "speed(1)", "Faster", key_display="+", id="replay.faster", tooltip="Replay: play faster (up to 64x)."),
    Binding("minus", "speed(-1)", "Slower", key_display="-", id="replay.slower", tooltip="Replay: play slower (down to 0.25x)."),
)

#: Keys of the history screen (listed on the help screen too).
HISTORY_KEYS: tuple[Binding, ...] = (
    Binding("escape,H", "close", "Close", key_display="esc", id="history.close", tooltip="Close the history view."),
    Binding("left_square_bracket", "span(-1)", "Shorter", key_display="[", id="history.shorter", tooltip="History: show fewer minutes."),
    Binding("right_square_bracket", "span(1)", "Longer", key_display="]", id="history.longer", tooltip="History: show more minutes."),
)

#: Keys of the network screen.
NETWORK_KEYS: tuple[Binding, ...] = (
    Binding("escape,n", "close", "Close", key_display="esc", id="network.close", tooltip="Close the network view."),
)

#: Keys of the stack dump screens (listed on the help screen too).
STACKS_KEYS: tuple[Binding, ...] = (
    Binding(
        "escape,t",
        "close",
        "Close",
        key_display="esc",
        id="stacks.close",
        tooltip="Close the stack dump (a rank's stacks: back to the groups).",
    ),
    Binding(
        "left,left_square_bracket",
        "other_rank(-1)",
        "Previous rank",
        key_display="← [",
        id="stacks.previous",
        tooltip="In a rank's stacks: the previous rank of the group.",
    ),
    Binding(
        "right,right_square_bracket",
        "other_rank(1)",
        "Next rank",
        key_display="→ ]",
        id="stacks.next",
        tooltip="In a rank's stacks: the next rank of the group.",
    ),
)

#: Keys of the capture screen (listed on the help screen too).
CAPTURE_KEYS: tuple[Binding, ...] = (
    Binding(
        "escape,P,M",
        "close",
        "Close",
        key_display="esc",
        id="capture.close",
        tooltip="Close the capture screen; a capture in progress goes on (P shows it again).",
    ),
)

#: Keys of the help screen itself (listed there too).
HELP_KEYS: tuple[Binding, ...] = (
    Binding("escape,question_mark,f1", "close", "Close", key_display="esc", id="help.close", tooltip="Close this screen."),
)
