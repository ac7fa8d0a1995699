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
        "h",
        "history",
        "History",
        id="history",
        tooltip="The job's step time over the last minutes (median and slowest rank) and the selected rank's phases, "
        "with straggler and stall episodes marked: who was slow, in which phase, since when, at what cost.",
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

#: Keys of ``ranktop replay`` (on top of the main keys; space pauses the playback itself).
REPLAY_KEYS: tuple[Binding, ...] = (
    Binding("left", "seek(-10)", "-10s", key_display="←", id="replay.back", priority=True, tooltip="Replay: back 10 seconds."),
    Binding("right", "seek(10)", "+10s", key_display="→", id="replay.forward", priority=True, tooltip="Replay: forward 10 seconds."),
    Binding("shift+left,less_than_sign", "seek(-60)", "-1min", key_display="⇧← <", id="replay.back_minute", priority=True,
            tooltip="Replay: back one minute."),
    Binding("shift+right,greater_than_sign", "seek(60)", "+1min", key_display="⇧→ >", id="replay.forward_minute", priority=True,
            tooltip="Replay: forward one minute."),
    Binding("j", "goto", "Go to", id="replay.goto", tooltip="Replay: jump to a time (seconds, M:SS or H:MM:SS from the start; -S from the end)."),
    Binding("plus,equals_sign", "speed(1)", "Faster", key_display="+", id="replay.faster", tooltip="Replay: play faster (up to 64x)."),
    Binding("minus", "speed(-1)", "Slower", key_display="-", id="replay.slower", tooltip="Replay: play slower (down to 0.25x)."),
)

#: Keys of the history screen (listed on the help screen too).
HISTORY_KEYS: tuple[Binding, ...] = (
    Binding("escape,h", "close", "Close", key_display="esc", id="history.close", tooltip="Close the history view."),
    Binding("left_square_bracket", "span(-1)", "Shorter", key_display="[", id="history.shorter", tooltip="History: show fewer minutes."),
    Binding("right_square_bracket", "span(1)", "Longer", key_display="]", id="history.longer", tooltip="History: show more minutes."),
)

#: Keys of the stack dump screens (listed on the help screen too).
STACKS_KEYS: tuple[Binding, ...] = (
    Binding("escape,t", "close", "Close", key_display="esc", id="stacks.close", tooltip="Close the stack dump (a rank's stacks: back to the groups)."),
    Binding("left,left_square_bracket", "other_rank(-1)", "Previous rank", key_display="← [", id="stacks.previous", tooltip="In a rank's stacks: the previous rank of the group."),
    Binding("right,right_square_bracket", "other_rank(1)", "Next rank", key_display="→ ]", id="stacks.next", tooltip="In a rank's stacks: the next rank of the group."),
)

#: Keys of the capture screen (listed on the help screen too).
CAPTURE_KEYS: tuple[Binding, ...] = (
    Binding("escape,P,M", "close", "Close", key_display="esc", id="capture.close",
            tooltip="Close the capture screen; a capture in progress goes on (P shows it again)."),
)

#: Keys of the help screen itself (listed there too).
HELP_KEYS: tuple[Binding, ...] = (
    Binding("escape,question_mark,f1", "close", "Close", key_display="esc", id="help.close", tooltip="Close this screen."),
)
