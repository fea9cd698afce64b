"""Whether a job lease's holder is certainly gone: only a process of this host, boot and pid
namespace whose pid no longer runs (or runs a process started at another time)."""

from __future__ import annotations

import os
import subprocess
import sys

from memory_bridge.events import owners


def _exited_owner() -> str:
    code = "from memory_bridge.events.owners import owner_id; print(owner_id())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_an_owner_names_this_process_and_is_alive() -> None:
    owner = owners.owner_id()
    found = owners.holder(owner)
    assert found is not None and found.pid == os.getpid()
    assert len(owner) <= 80  # the jobs.lease_owner column
    assert not owners.is_gone(owner)


def test_an_exited_process_is_gone() -> None:
    assert owners.is_gone(_exited_owner())


def test_a_reused_pid_is_told_apart_by_its_start_time() -> None:
    host, space, pid, _start, nonce = owners.owner_id().split(":")
    assert owners.is_gone(f"{host}:{space}:{pid}:1:{nonce}")


def test_what_cannot_be_known_is_never_called_gone() -> None:
    host, space, pid, start, nonce = _exited_owner().split(":")
    assert not owners.is_gone(f"another-host:{space}:{pid}:{start}:{nonce}")
    assert not owners.is_gone(f"{host}:00000000:{pid}:{start}:{nonce}")  # another namespace
    assert not owners.is_gone(f"{host}:{pid}:{nonce}")  # an older version's format
    assert not owners.is_gone("")
