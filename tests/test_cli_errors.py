"""Bad input gets one clear line and a non-zero exit, never a traceback."""

import json
import os
import socket

from support import run_cli

from ranktop.transport import rendezvous


def assert_one_line_error(out, code, *fragments):
    assert out.returncode == code, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    for fragment in fragments:
        assert fragment in out.stderr, out.stderr


def test_an_unknown_job_is_waited_for_up_to_wait_then_named_in_the_error(rdv):
    out = run_cli("watch", "no-such-job", "--json", "--duration", "1", "--wait", "1.5")
    assert out.returncode == 3, out.stderr  # Exit.NOT_STARTED: a batch script tells it from a failure
    waiting, error = out.stderr.splitlines()
    assert waiting == f"ranktop: waiting for job 'no-such-job' to start under {rdv} (no job is running) for up to 1.5s"
    assert error.startswith("ranktop: error: unknown job 'no-such-job'") and error.endswith("gave up after waiting 1.5s (--wait)")
    out = run_cli("ping", "no-such-job", "--wait", "0")
    assert_one_line_error(out, 3, "unknown job 'no-such-job'", "no job is running")
    assert len(out.stderr.splitlines()) == 1


def test_watch_with_nothing_running_says_how_to_start(rdv):
    assert_one_line_error(run_cli("watch", "--json"), 1, "no running job found", "ranktop demo")


def test_an_ended_job_is_recognised_by_its_stale_record(rdv):
    rendezvous.write_node(rendezvous.NodeRecord("dead-job", os.uname().nodename, "tcp://x:1", "tcp://x:2", pid=2**22 + 7, started=0.0))
    assert_one_line_error(run_cli("watch", "dead-job", "--json", "--wait", "0"), 3, "job 'dead-job' has ended")
    assert run_cli("jobs").stdout.startswith("no running jobs")
    assert "dead-job\tended" in run_cli("jobs", "--all").stdout


def test_an_endpoint_nobody_answers_is_reported_while_waiting_with_why(rdv):
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        out = run_cli("watch", f"tcp://127.0.0.1:{port}", "--json", "--duration", "4")
    assert_one_line_error(
        out,
        1,
        f"no answer from tcp://127.0.0.1:{port} after 3s (nothing listens at 127.0.0.1:{port}); still waiting",
        f"no rank reported within 4s (tcp://127.0.0.1:{port}: nothing listens at 127.0.0.1:{port})",
    )
    doc = json.loads(out.stdout)
    assert doc["endpoints"][0]["state"] == "waiting"


def test_an_endpoint_whose_host_does_not_resolve_is_said_so(rdv):
    out = run_cli("watch", "tcp://no-such-host.invalid:5", "--json", "--duration", "1")
    assert_one_line_error(out, 1, "no rank reported within 1s (tcp://no-such-host.invalid:5: host no-such-host.invalid does not resolve)")


def test_an_endpoint_that_accepts_but_sends_nothing_is_not_blamed_on_the_network(rdv):
    with socket.socket() as s:  # something listens (a relay with no rank yet looks so): no reason is made up
        s.bind(("127.0.0.1", 0))
        s.listen()
        out = run_cli("watch", f"tcp://127.0.0.1:{s.getsockname()[1]}", "--json", "--duration", "1")
    assert_one_line_error(out, 1)
    assert out.stderr.rstrip().endswith("ranktop: error: no rank reported within 1s"), out.stderr


def test_a_malformed_endpoint_is_refused(rdv):
    assert_one_line_error(run_cli("watch", "tcp://host:notaport", "--json"), 1, "not an endpoint")


def test_a_bad_flag_is_a_usage_error():
    assert_one_line_error(run_cli("watch", "--duration", "-3"), 2, "must be positive")
    assert_one_line_error(run_cli("watch", "--frobnicate"), 2, "unrecognized arguments: --frobnicate")
    assert_one_line_error(run_cli("ping", "--ranks", "a,b"), 2, "comma-separated rank numbers")


def test_help_lists_every_command():
    out = run_cli("--help")
    assert out.returncode == 0
    for command in ("watch", "attach", "jobs", "ping", "demo"):
        assert command in out.stdout


def test_the_rendezvous_folder_can_be_given_after_the_command(tmp_path):
    out = run_cli("jobs", "--dir", str(tmp_path / "elsewhere"))
    assert out.returncode == 0 and str(tmp_path / "elsewhere") in out.stdout


def test_capture_with_no_job_running_or_a_bad_step_count_is_a_one_line_error(rdv):
    assert_one_line_error(run_cli("capture"), 1, "ranktop: error: no running job found")
    assert_one_line_error(run_cli("memsnap", "no-such-job"), 1, "ranktop: error: unknown job 'no-such-job'")
    assert_one_line_error(run_cli("capture", "job", "--steps", "51"), 2, "steps must be a whole number from 1 to 50, got 51")
    assert_one_line_error(run_cli("capture", "job", "--steps", "-1"), 2, "steps must be a whole number from 1 to 50, got -1")
    assert_one_line_error(run_cli("capture", "job", "--ranks", "a"), 2, "expected comma-separated rank numbers")


def test_jobs_counts_the_ended_job_folders_and_prunes_those_idle_past_the_grace(rdv):
    import time

    from ranktop.watch import job_folders

    for job, age in (("old-job", job_folders.ENDED_GRACE_S + 3600), ("recent-job", 3600), ("starting-job", 5)):
        rendezvous.load_or_create_secret(job)
        rendezvous.write_node(rendezvous.NodeRecord(job, os.uname().nodename, "tcp://x:1", "tcp://x:2", pid=2**22 + 7, started=0.0))
        folder = rendezvous.job_dir(job)
        (folder / "captures").mkdir()
        for path in folder.iterdir():
            os.utime(path, (time.time() - age, time.time() - age))
    out = run_cli("jobs")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0].startswith("no running jobs")
    assert lines[1].startswith(
        f"1 ended job folder(s) with their secrets under {rdv / 'jobs'}: `ranktop jobs --all` lists them, "
        "`ranktop jobs --prune` removes them"
    )  # recent-job; starting-job may still be starting
    assert out.stderr == "ranktop: removed the secrets and records of 1 job(s) ended over 24 h ago\n"
    old = rendezvous.job_dir("old-job")
    assert not (old / "secret").exists() and (old / "captures").is_dir()  # a job's captures stay
    assert (rendezvous.job_dir("recent-job") / "secret").exists()
    out = run_cli("jobs", "--prune")
    assert f"removed the secret and records of {rendezvous.job_dir('recent-job')}" in out.stdout
    assert (rendezvous.job_dir("starting-job") / "secret").exists()
