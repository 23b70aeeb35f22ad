"""Where the vllm engine's vLLM writes: one state directory per worker, and the variables that point there.

Everything vLLM writes goes under the state directory (Deployment gives each worker
`<run_dir>/<worker>-state`): its temp files, the ZMQ socket files, its config and caches.
Those variables are set before vLLM is imported: the processes it spawns inherit them,
and vLLM and torch read some of them only once. The model-class cache
(`VLLM_CACHE_ROOT`) may be shared: `EMBEDLAB_VLLM_CACHE` names a directory for it, which
Deployment sets to `<run_dir>/vllm-cache`; without it the cache stays in the state dir.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import tempfile
from pathlib import Path

from ..defaults import VLLM_CACHE_ENV
from ..errors import EngineError

__all__ = ["EngineState", "stop_child_processes"]

# VLLM_RPC_BASE_PATH (ZMQ ipc:// socket files, never unlinked by vLLM) is <state>/rpc, set
# apart below: a socket path has at most 107 bytes, and vLLM appends "/<uuid4>" (37).
MAX_RPC_BASE = 107 - 37

# Variable -> directory under the state dir: where vLLM, torch or Hugging Face would
# otherwise write, in /tmp or the user's home.
STATE_ENV = {
    "TMPDIR": "tmp",  # vllm_dist_* (torch.distributed file store), registry scratch, weight locks
    "VLLM_CONFIG_ROOT": "config/vllm",  # usage_stats.json
    "XDG_CACHE_HOME": "cache",  # the fallback of every cache below
    "TORCHINDUCTOR_CACHE_DIR": "cache/inductor",
    "TRITON_CACHE_DIR": "cache/triton",
    "HF_HOME": "cache/hf",
}
FIXED_ENV = {
    "VLLM_NO_USAGE_STATS": "1",  # else a usage report goes to stats.vllm.ai, off loopback
    "VLLM_DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",  # a model path is a local directory; never reach for the hub
}


class _Environment:
    """The variables the engine sets, and what they were before, to put back at close."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def set(self, name: str, value: str) -> None:
        self._saved.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def unset(self, name: str) -> None:
        self._saved.setdefault(name, os.environ.get(name))
        os.environ.pop(name, None)

    def restore(self) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved.clear()
        tempfile.tempdir = None  # gettempdir() caches TMPDIR: make it read the variable again


class EngineState:
    """One engine's state directory and environment: set up before vLLM starts, undone at close."""

    def __init__(self) -> None:
        self._env = _Environment()
        self.directory: Path | None = None
        self._own = False
        self._rpc_link: Path | None = None

    def prepare(self, state_dir: Path | None) -> Path:
        if state_dir is not None:
            state = Path(state_dir).resolve()
        else:
            # No run directory (a worker started by hand): a private one, removed at close.
            state = Path(tempfile.mkdtemp(prefix="embedlab-vllm-"))
            self._own = True
        self.directory = state
        system_tmp = tempfile.gettempdir()  # read before TMPDIR moves into the state dir
        for name, sub in STATE_ENV.items():
            (state / sub).mkdir(parents=True, exist_ok=True)
            self._env.set(name, str(state / sub))
        (state / "rpc").mkdir(exist_ok=True)
        self._env.set("VLLM_RPC_BASE_PATH", self._rpc_base(state / "rpc", system_tmp))
        # The model-class cache: a cold one costs a subprocess that imports vLLM (15-30 s
        # on 2 cores), so Deployment shares one per run, and a user may keep one on purpose.
        cache = Path(os.environ.get(VLLM_CACHE_ENV) or state / "cache" / "vllm").expanduser().resolve()
        cache.mkdir(parents=True, exist_ok=True)
        self._env.set("VLLM_CACHE_ROOT", str(cache))
        for name, value in FIXED_ENV.items():
            self._env.set(name, value)
        tempfile.tempdir = None  # this process may have read TMPDIR already
        # vLLM reads this as a whole number of GiB; an empty value crashes its worker
        # process after a full start, a set one overrides kv_cache_memory_bytes.
        kv_space = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
        if kv_space is not None and not kv_space.strip():
            self._env.unset("VLLM_CPU_KVCACHE_SPACE")
        elif kv_space is not None and not kv_space.strip().isdigit():
            raise EngineError(
                f"VLLM_CPU_KVCACHE_SPACE must be a whole number of GiB or unset, not {kv_space!r}"
            )
        return state

    def _rpc_base(self, rpc_dir: Path, system_tmp: str) -> str:
        """Where vLLM puts its ZMQ socket files: `<base>/<uuid4>`.

        A socket path holds at most 107 bytes, and a run directory can be deeper than that
        allows (pytest's are). Then a short symlink in the system temp dir leads to the
        state dir: the sockets still live in the run directory, and the link goes at close.
        """
        if len(os.fsencode(rpc_dir)) <= MAX_RPC_BASE:
            return str(rpc_dir)
        for root in (system_tmp, "/tmp"):
            link = Path(root) / f"embedlab-vllm-rpc-{secrets.token_hex(4)}"
            if len(os.fsencode(link)) <= MAX_RPC_BASE:
                link.symlink_to(rpc_dir, target_is_directory=True)
                self._rpc_link = link
                return str(link)
        raise EngineError(
            f"no socket path short enough for vLLM: {rpc_dir} is {len(str(rpc_dir))} characters long"
        )

    def close(self) -> None:
        if self._rpc_link is not None:
            self._rpc_link.unlink(missing_ok=True)
            self._rpc_link = None
        if self.directory is not None:
            # vLLM leaves its socket files behind, even after a clean shutdown.
            for sub in ("rpc", "tmp"):
                shutil.rmtree(self.directory / sub, ignore_errors=True)
            if self._own:
                shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
        self._env.restore()


def stop_child_processes() -> None:
    """SIGTERM this process's children: vLLM's EngineCore (which stops its own Worker) and
    its model-inspection subprocess. Not multiprocessing's resource tracker, which must
    outlive them to remove their shared memory. A worker process starts no other children.
    """
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # The command may hold spaces and parentheses: the fields start after the last ')'.
        if int(stat[stat.rindex(")") + 2 :].split()[1]) != me or b"resource_tracker" in cmdline:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(entry.name), signal.SIGTERM)
