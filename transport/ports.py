"""The port convention: where a node's relay listens when no shared rendezvous folder tells.

On a cluster without a shared home directory, a TUI on the login node cannot
read the node records the relays write. It still knows the job's nodes (from
SLURM) and, through this convention, the ports: the relay of a SLURM job binds

    telemetry = RANKTOP_PORT_BASE + 2 * (job id % JOB_SLOTS)      control = telemetry + 1

on every node of the job (default base 24000: ports 24000-25999, below Linux's
ephemeral range 32768-60999, so outgoing connections never hold them, and clear
of torch's 29400/29500; a site with other plans for them sets RANKTOP_PORT_BASE).
``RANKTOP_PORT`` pins the telemetry port instead (control: the next one), for
one job or outside SLURM; ``RANKTOP_PORT=0`` asks for random ports. Both sides
import this module, so the relay and the TUI always agree. A port that is
taken makes the relay fall back to a random one and say so on stderr: the
rendezvous folder still finds it, the convention does not.
"""

from __future__ import annotations

import os
import re
from typing import Mapping, overload

from ranktop.wire import settings

DEFAULT_PORT_BASE = 24000
#: Jobs whose ids differ by a multiple of this share ports (a clash only if they share a node).
JOB_SLOTS = 1000
_JOB_ID = re.compile(r"^(\d+)")


class PortConfigError(ValueError):
    """RANKTOP_PORT or RANKTOP_PORT_BASE is not a usable port number."""


@overload
def _port(env: Mapping[str, str], name: str, default: int, span: int = 1) -> int: ...
@overload
def _port(env: Mapping[str, str], name: str, default: None, span: int = 1) -> int | None: ...
def _port(env: Mapping[str, str], name: str, default: int | None, span: int = 1) -> int | None:
    text = env.get(name, "")
    if text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise PortConfigError(f"{name}={text!r} is not a port number") from None
    if not (value == 0 and name == settings.PORT.name) and not 1024 <= value <= 65535 - span:
        raise PortConfigError(f"{name}={value} is outside 1024-{65535 - span}")
    return value


def port_base(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    return _port(env, settings.PORT_BASE.name, DEFAULT_PORT_BASE, span=2 * JOB_SLOTS)


def slurm_ports(job_id: str, env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(telemetry, control) of a SLURM job's relays by the convention; ``job_id`` is its numeric id."""
    match = _JOB_ID.match(str(job_id))
    if match is None:
        raise PortConfigError(f"not a SLURM job id: {job_id!r}")
    telemetry = port_base(env) + 2 * (int(match.group(1)) % JOB_SLOTS)
    return telemetry, telemetry + 1


def relay_ports(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """The ports this node's relay should bind, or None for random ones.

    ``RANKTOP_PORT`` first (0: random), then the SLURM convention when the
    process runs in a SLURM job (``SLURM_JOB_ID``), else random.
    """
    env = os.environ if env is None else env
    pinned = _port(env, settings.PORT.name, None, span=1)
    if pinned is not None:
        return None if pinned == 0 else (pinned, pinned + 1)
    if env.get("SLURM_JOB_ID"):
        return slurm_ports(env["SLURM_JOB_ID"], env)
    return None
