"""What SLURM says about a job, read from `scontrol show job -o` output captured on the test cluster.

The files in tests/data/slurm/ are real output of slurm-wlm 22.05 (tests/slurm_cluster.py):
a running 2-task job, a pending one, a completed and a cancelled one, a job
array with two running tasks, one array task, and a heterogeneous job.
"""

from pathlib import Path

import pytest

from ranktop.watch import slurm
from ranktop.cli.attach import ssh_command
from ranktop.watch.engine.receiver import tunnelled_control
from ranktop.transport import ports, rendezvous

import messages

DATA = Path(__file__).parent / "data" / "slurm"


def records(name: str) -> list[dict]:
    return slurm.parse_show_job((DATA / f"{name}.txt").read_text())


def job(name: str, requested: str = "1", expand=lambda nodes: nodes.split(",")) -> slurm.SlurmJob:
    return slurm.job_from_records(requested, records(name), expand)


def test_a_running_job_has_its_state_owner_and_nodes():
    running = job("running")
    assert (running.job_id, running.name, running.state, running.user, running.uid) == ("1", "train", "RUNNING", "root", 0)
    assert running.nodes == ("vm",)
    slurm.check_watchable(running, "1", uid=0)


def test_values_with_spaces_and_equal_signs_stay_whole():
    (rec,) = slurm.parse_show_job("JobId=7 JobName=a b c TRES=cpu=2,node=1 Command=/x/train.py --lr=3 UserId=u(5)")
    assert rec == {"JobId": "7", "JobName": "a b c", "TRES": "cpu=2,node=1", "Command": "/x/train.py --lr=3", "UserId": "u(5)"}


@pytest.mark.parametrize(
    "name, message",
    [
        ("pending", "SLURM job 1 is pending (Priority): nothing to watch until it starts"),
        ("completed", "SLURM job 1 has ended (completed)"),
        ("cancelled", "SLURM job 1 has ended (cancelled)"),
    ],
)
def test_a_job_that_is_not_running_gets_one_line_saying_why(name, message):
    with pytest.raises(slurm.SlurmError) as err:
        slurm.check_watchable(job(name), "1", uid=0)
    assert str(err.value) == message


def test_another_users_job_is_refused_with_whose_it_is():
    with pytest.raises(slurm.SlurmError, match=r"SLURM job 1 belongs to root, not to you \(.*\)"):
        slurm.check_watchable(job("running"), "1", uid=4242)


def test_an_unknown_job_is_said_to_be_unknown():
    with pytest.raises(slurm.SlurmError, match="SLURM job 9 is unknown"):
        slurm.job_from_records("9", [])


def test_an_array_with_several_running_tasks_asks_for_one_of_them():
    with pytest.raises(slurm.SlurmError) as err:
        job("array", "2")
    assert str(err.value) == "SLURM job 2 is an array of 2 tasks, name one: 2_2 (running), 2_1 (running)"


def test_one_array_task_is_watched_under_its_own_job_id():
    task = job("array_task", "2_2")
    assert task.job_id == "2" and task.array == "2_2" and task.state == "RUNNING"


def test_a_heterogeneous_job_is_one_job_under_its_leaders_id_with_every_components_nodes():
    het = job("het", "4")
    assert het.job_id == "4" and het.het_components == 2
    (component,) = records("het_component")  # `scontrol show job 4+1`: the second component alone
    assert slurm.job_from_records("4+1", [component]).job_id == "4"


def test_nodes_of_all_components_are_collected_once():
    recs = [dict(r) for r in records("het")]
    recs[0].update(NodeList="n[1-2]", JobState="RUNNING")
    recs[1].update(NodeList="n[2-3]", JobState="RUNNING")
    expand = {"n[1-2]": ["n1", "n2"], "n[2-3]": ["n2", "n3"]}.__getitem__
    assert slurm.job_from_records("4", recs, expand).nodes == ("n1", "n2", "n3")


def test_job_ids_look_like_slurms():
    assert all(slurm.is_job_id(t) for t in ("123456", "123_4", "123+1"))
    assert not any(slurm.is_job_id(t) for t in ("demo-1", "tcp://a:1", "12a", ""))


# -- the port convention --------------------------------------------------------


def test_the_port_convention_is_derived_from_the_job_id_and_the_base():
    assert ports.slurm_ports("123456", {}) == (24000 + 2 * 456, 24000 + 2 * 456 + 1)
    assert ports.slurm_ports("7", {"RANKTOP_PORT_BASE": "30000"}) == (30014, 30015)


def test_a_relay_under_slurm_binds_the_convention_unless_ranktop_port_says_otherwise():
    assert ports.relay_ports({"SLURM_JOB_ID": "42"}) == (24084, 24085)
    assert ports.relay_ports({"SLURM_JOB_ID": "42", "RANKTOP_PORT": "31000"}) == (31000, 31001)
    assert ports.relay_ports({"SLURM_JOB_ID": "42", "RANKTOP_PORT": "0"}) is None
    assert ports.relay_ports({}) is None


@pytest.mark.parametrize("env", [{"RANKTOP_PORT": "http"}, {"RANKTOP_PORT": "80"}, {"SLURM_JOB_ID": "1", "RANKTOP_PORT_BASE": "65000"}])
def test_a_bad_port_setting_is_named(env):
    with pytest.raises(ports.PortConfigError, match="RANKTOP_PORT"):
        ports.relay_ports(env)


# -- watching from a laptop ----------------------------------------------------------


def node(host: str, tele: int, ctl: int) -> rendezvous.NodeRecord:
    return rendezvous.NodeRecord("9", host, f"tcp://{host}:{tele}", f"tcp://{host}:{ctl}", pid=0, started=0.0)


def test_the_ssh_command_forwards_every_nodes_telemetry_and_control_port_side_by_side():
    command, urls = ssh_command([node("n1", 24018, 24019), node("n2", 24018, 24019)], "login.example.org", "bastion", 7000)
    assert command == ("ssh -N -J bastion -L 7000:n1:24018 -L 7001:n1:24019 -L 7002:n2:24018 -L 7003:n2:24019 login.example.org")
    assert urls == ["tcp://localhost:7000", "tcp://localhost:7002"]


def test_behind_a_tunnel_the_control_port_is_found_at_the_relays_offset():
    assert tunnelled_control("tcp://localhost:7002", "tcp://n2:24018", "tcp://n2:24019") == "tcp://localhost:7003"
    assert tunnelled_control("tcp://n2:24018", "tcp://n2:24018", "tcp://n2:24019") == "tcp://n2:24019"


def test_a_job_with_a_numeric_name_outside_slurm_is_still_watched_by_name(rdv, tmp_path, monkeypatch):
    """No SLURM configured here (SLURM_CONF pointing nowhere): the rendezvous job is meant, and found at once."""
    import os
    import time

    from ranktop.watch.session import resolve

    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-such-slurm.conf"))
    assert not slurm.configured()
    rendezvous.write_node(rendezvous.NodeRecord("4242", os.uname().nodename, "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", os.getpid(), 0.0))
    started = time.monotonic()
    assert resolve(["4242"]).job == "4242" and time.monotonic() - started < 1.0


def test_a_hello_with_a_malformed_relay_address_is_dropped_not_fatal():
    from ranktop.watch.aggregator import Aggregator
    from ranktop.watch.engine.receiver import Receiver
    from ranktop.wire.names import HELLO

    agg, controls = Aggregator(), []
    receiver = Receiver(agg, ["tcp://localhost:7000"], on_control=controls.append)

    class OneHello:
        sent = False

        def getsockopt(self, option):  # as a socket answers zmq.EVENTS: POLLIN while a message is queued
            import zmq

            return 0 if self.sent else zmq.POLLIN

        def recv_multipart(self, flags=0):
            import zmq

            if self.sent:
                raise zmq.Again()
            self.sent = True
            hello = {
                "job": "j",
                "rank": 0,
                "ts": 0.0,
                "host": "n1",
                "world": 1,
                "local_rank": 0,
                "pid": 1,
                "relay": {"telemetry": "tcp://n1:24018", "control": "tcp://n1:notaport"},
            }
            return messages.raw(HELLO, hello)

    sock = OneHello()
    receiver._urls = {sock: "tcp://localhost:7000"}
    batch = []
    receiver._drain(sock, batch)
    receiver._take(batch)
    assert controls == [] and agg.snapshot().dropped_messages == 1 and agg.snapshot().world_size == 1
    receiver._context.term()


def test_an_array_whose_tasks_have_all_ended_has_ended():
    done = [dict(r, JobState="COMPLETED") for r in records("array")]
    with pytest.raises(slurm.SlurmError, match=r"SLURM job 2 has ended \(completed\)"):
        slurm.check_watchable(slurm.job_from_records("2", done), "2", uid=0)
