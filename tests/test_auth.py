"""Command signing: only the job's secret commands a rank, and only once."""

import pytest

from ranktop.wire import auth

SECRET = b"s" * 64


def test_a_signed_command_verifies():
    cid, frames = auth.sign_command(SECRET, "job", "ping", {"a": 1}, [0, 2], now=1000.0)
    msg = auth.CommandVerifier(SECRET, "job").verify(frames, now=1000.5)
    assert (msg.id, msg.cmd, msg.args, msg.ranks) == (cid, "ping", {"a": 1}, [0, 2])


def test_a_command_signed_with_another_key_is_forged():
    _, frames = auth.sign_command(b"other-key", "job", "ping", now=1000.0)
    with pytest.raises(auth.AuthError) as err:
        auth.CommandVerifier(SECRET, "job").verify(frames, now=1000.0)
    assert err.value.reason == "forged"


def test_a_tampered_body_is_forged():
    _, frames = auth.sign_command(SECRET, "job", "ping", now=1000.0)
    frames[1] = frames[1].replace(b"ping", b"pong")
    with pytest.raises(auth.AuthError) as err:
        auth.CommandVerifier(SECRET, "job").verify(frames, now=1000.0)
    assert err.value.reason == "forged"


def test_an_unsigned_command_is_forged():
    _, frames = auth.sign_command(SECRET, "job", "ping", now=1000.0)
    with pytest.raises(auth.AuthError) as err:
        auth.CommandVerifier(SECRET, "job").verify(frames[:2], now=1000.0)
    assert err.value.reason == "forged"


def test_the_same_command_twice_is_a_replay():
    _, frames = auth.sign_command(SECRET, "job", "ping", now=1000.0)
    verifier = auth.CommandVerifier(SECRET, "job")
    verifier.verify(frames, now=1000.0)
    with pytest.raises(auth.AuthError) as err:
        verifier.verify(frames, now=1001.0)
    assert err.value.reason == "replayed"


def test_an_old_command_is_expired_even_after_its_id_is_forgotten():
    _, frames = auth.sign_command(SECRET, "job", "ping", now=1000.0)
    with pytest.raises(auth.AuthError) as err:
        auth.CommandVerifier(SECRET, "job").verify(frames, now=1000.0 + auth.MAX_SKEW_S + 1)
    assert err.value.reason == "expired"


def test_a_command_for_another_job_is_refused():
    _, frames = auth.sign_command(SECRET, "other-job", "ping", now=1000.0)
    with pytest.raises(auth.AuthError) as err:
        auth.CommandVerifier(SECRET, "job").verify(frames, now=1000.0)
    assert err.value.reason == "foreign-job"
