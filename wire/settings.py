"""Every ``RANKTOP_*`` environment variable, in one registry: name, default, bounds, meaning.

Both sides read their settings through this table, so a name is typed once
(the probe reads it in the job, ``ranktop launch`` writes it for the job) and
the README's environment table is checked against it by the tests. The
bounds of the telemetry rate live here too: the probe's ``init``, its
``set_rate`` command and the ``--rate`` options all check the same range.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Setting:
    name: str
    doc: str
    default: str | None = None  # as the environment would spell it; None: unset means "not given"

    def get(self, env: Mapping[str, str] | None = None) -> str | None:
        """The value in ``env`` (default: this process's environment), else the default; "" counts as unset."""
        value = (os.environ if env is None else env).get(self.name)
        return value if value else self.default

    def on(self, env: Mapping[str, str] | None = None) -> bool:
        """A switch: set to anything but "" or "0"."""
        return (self.get(env) or "0") != "0"


#: Telemetry messages per second a rank may be asked for (probe.init, set_rate, --rate).
MIN_RATE_HZ, MAX_RATE_HZ = 0.1, 50.0
#: What a rank sends when nobody said otherwise.
DEFAULT_RATE_HZ = 4.0


def rate_problem(hz: object) -> str | None:
    """Why ``hz`` is no telemetry rate, or None when it is one."""
    if isinstance(hz, bool) or not isinstance(hz, (int, float)) or not MIN_RATE_HZ <= hz <= MAX_RATE_HZ:
        return f"must be between {MIN_RATE_HZ:g} and {MAX_RATE_HZ:g}, got {hz!r}"
    return None


DIR = Setting("RANKTOP_DIR", "rendezvous directory (default `~/.ranktop`)")
JOB = Setting("RANKTOP_JOB", "job name (default: `SLURM_JOB_ID`, torchrun's run id, or `torchrun-MASTER_ADDR-MASTER_PORT`)")
SECRET = Setting("RANKTOP_SECRET", "the job's secret (command key and CURVE keys), instead of the job folder's `secret` file")
CURVE = Setting(
    "RANKTOP_CURVE", "`0` on the job and the viewer: TCP traffic unencrypted and unauthenticated (debugging; docs/security.md)", "1"
)
BIND = Setting("RANKTOP_BIND", "interface address the relay listens on (default `0.0.0.0`)", "0.0.0.0")
HOST = Setting("RANKTOP_HOST", "this node's name, and its relay's address when bound to every interface (default: the host name)")
PORT = Setting("RANKTOP_PORT", "the relay's telemetry port (control: the next one; `0`: random)")
PORT_BASE = Setting("RANKTOP_PORT_BASE", "the base of the SLURM port convention (default 24000; docs/clusters.md)")
DISABLE = Setting("RANKTOP_DISABLE", "`1` keeps the probe off")
CAPTURE_DIR = Setting("RANKTOP_CAPTURE_DIR", "where ranks write traces and memory snapshots (default `<rendezvous>/jobs/<job>/captures`)")
AUTO = Setting("RANKTOP_AUTO", "`1` (set by `ranktop launch`): automatic mode in every process that imports torch and is a rank")
RATE = Setting("RANKTOP_RATE", "telemetry messages per second in automatic mode (`ranktop launch --rate`)")
BATCH_SIZE = Setting("RANKTOP_BATCH_SIZE", "samples per rank per step, when `probe.init` is not told (`ranktop launch --batch-size`)")
TOKENS_PER_STEP = Setting("RANKTOP_TOKENS_PER_STEP", "tokens per rank per step, when `probe.init` is not told")
FLOPS_PER_STEP = Setting("RANKTOP_FLOPS_PER_STEP", "model FLOPs per rank per step, when `probe.init` is not told")
PEAK_TFLOPS = Setting("RANKTOP_PEAK_TFLOPS", "the device's peak TFLOP/s for MFU, instead of the built-in table")
FLOPS_DTYPE = Setting(
    "RANKTOP_FLOPS_DTYPE",
    "the dtype whose peak MFU is against (`fp32`, `tf32`, `bf16`, ...), when `probe.init` is not told; "
    "else the one the job computes in (`ranktop launch --flops-dtype`)",
)
DEVICE_TIMING = Setting("RANKTOP_DEVICE_TIMING", "`off`: no CUDA events in automatic mode; `cpu`: host-clock events (tests)", "auto")
LAYOUT = Setting(
    "RANKTOP_LAYOUT",
    "the job's parallel layout when its groups do not say it, outermost first: `pp=4,tp=8,dp=-1` (docs/parallelism.md)",
)
LINK_PROBES = Setting(
    "RANKTOP_LINK_PROBES",
    "`0`: the relays measure no links between the job's nodes (relay/links.py; no `slow_link` verdict then)",
    "1",
)
DIGESTS = Setting(
    "RANKTOP_DIGESTS",
    "viewer: `on` takes one digest per node (relay/digest_fold.py) instead of every rank's messages, `off` never; `auto`: from 16 nodes up",
    "auto",
)

#: Every setting, in the order the README lists them.
ALL = (
    DIR,
    JOB,
    SECRET,
    CURVE,
    BIND,
    HOST,
    PORT,
    PORT_BASE,
    DISABLE,
    CAPTURE_DIR,
    AUTO,
    RATE,
    BATCH_SIZE,
    TOKENS_PER_STEP,
    FLOPS_PER_STEP,
    PEAK_TFLOPS,
    FLOPS_DTYPE,
    DEVICE_TIMING,
    LAYOUT,
    DIGESTS,
    LINK_PROBES,
)
