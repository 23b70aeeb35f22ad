"""One live deployment per notebook: what an explore notebook's Start cell runs.

    dep = start_deployment(plan)   # stops what the last call started, then launches, with progress
    ...                            # bursts, weight changes: as many cells as you like
    stop_deployment()              # or dep.stop(), or restart the kernel: every process stops with it

A kernel runs one notebook, so "this notebook's deployment" is this process's. Running
the Start cell again stops the deployment the previous run of it started before it
launches the next: re-running a cell never leaks servers that nothing can reach any more.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..cluster.deployment import Deployment
from ..cluster.spec import DeploymentSpec
from ..errors import ConfigError
from ..freshness import check_fresh, guarded
from ..progress import LaunchProgress
from ..scenarios.plan import ScenarioPlan

__all__ = ["live_deployment", "start_deployment", "stop_deployment"]

# key -> the deployment start_deployment(key=key) last started in this process.
_LIVE: dict[str, Deployment] = {}


@guarded("deployment")
def start_deployment(
    what: ScenarioPlan | DeploymentSpec,
    *,
    key: str = "notebook",
    progress: bool = True,
    stop_on_error: bool = False,
) -> Deployment:
    """Start the deployment `what` describes, after stopping the one this call last started.

    `key` names the slot: a notebook that wants two deployments side by side gives each
    its own. `progress` shows the launch (which process, what it waits for, the time so
    far). A start that fails stops what it had started and raises; the slot is left empty.
    A plan whose `seed` is None gets a fresh one, which the deployment's table shows (give it
    back as `seed` to route as this start did). `stop_on_error`: the first cell that fails after this one stops the deployment (Run All
    halts there, and never reaches the notebook's last cell, which would have stopped it); for
    a notebook that says it stops everything. A notebook for exploring leaves it False.
    """
    if isinstance(what, ScenarioPlan):
        if what.attached:
            raise ConfigError("this plan attaches to a running deployment; it has nothing to start")
        if what.seed is None:  # routing that differs from one start to the next, its seed kept and shown
            what = replace(what, seed=secrets.randbelow(2**31))
        spec, run_dir = what.deployment_spec(), what.run_dir or None
    elif isinstance(what, DeploymentSpec):
        spec, run_dir = what, None
    else:
        raise ConfigError(
            f"start_deployment takes a ScenarioPlan or a DeploymentSpec, not {type(what).__name__}"
        )
    stopped = _stop(key)
    if stopped and progress:
        print(stopped, flush=True)  # the cell's output says what went away, above what starts
    if run_dir is not None:
        run_dir = str(_fresh(Path(run_dir)))
    deployment = Deployment(spec, run_dir=run_dir, progress=LaunchProgress() if progress else None)
    deployment.start()
    _LIVE[key] = deployment
    if stop_on_error:
        _stop_on_error(key, deployment)
    return deployment


def _stop_on_error(key: str, deployment: Deployment) -> None:
    """In IPython, stop `deployment` after the first cell that fails while it is the slot's."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - the notebook extra is installed with embedlab
        return
    shell = get_ipython()
    if shell is None:
        return

    def after(result: Any) -> None:
        if _LIVE.get(key) is not deployment:
            shell.events.unregister("post_run_cell", after)
            return
        if result.error_before_exec is not None or result.error_in_exec is not None:
            shell.events.unregister("post_run_cell", after)
            stopped = _stop(key)
            if stopped:
                print(f"a cell failed: {stopped}", flush=True)

    shell.events.register("post_run_cell", after)


def live_deployment(*, key: str = "notebook") -> Deployment | None:
    """The deployment `start_deployment(key=key)` last started, stopped or not; None if none."""
    return _LIVE.get(key)


def stop_deployment(*, key: str = "notebook", when: bool = True) -> None:
    """Stop the deployment in slot `key`, if any, and if `when`; safe to call more than once.

    An explore notebook's last cell is `stop_deployment(when=stop_at_end)`: papermill runs
    set `stop_at_end`, people leave it False and keep their deployment. Prints what it
    stopped, or that the deployment keeps running, in a line; returns nothing (a notebook
    cell would show a returned line quoted, and `''` where there was nothing to say).
    """
    # Stopping a stale deployment is refused as any call on it is: the last cell of a Run All
    # whose plan cell failed fails too, and does not end the notebook as if all went well.
    check_fresh(_LIVE.get(key))
    if when:
        stopped = _stop(key)
        if stopped:
            print(stopped)
        return
    live = _LIVE.get(key)
    if live is not None and any(p.alive() for p in live.processes):
        print(
            f"the deployment keeps running (run dir {live.run_dir}): stop_deployment() or dep.stop() stops it"
        )


def _stop(key: str) -> str:
    previous = _LIVE.pop(key, None)
    if previous is None:
        return ""
    running = [p for p in previous.processes if p.alive()]
    started = time.monotonic()
    previous.stop()
    if not running:
        return ""
    workers = sum(1 for p in running if p in previous.workers)
    what = ", ".join(p.name for p in running if p not in previous.workers)
    what = f"{what} and {workers} worker{'' if workers == 1 else 's'}" if what else f"{workers} workers"
    return (
        f"stopped the deployment this notebook started ({what}, run dir {previous.run_dir}) "
        f"in {time.monotonic() - started:.1f} s"
    )


def _fresh(run_dir: Path) -> Path:
    """`run_dir` if nothing ran there yet, else its first unused `start-N` subfolder.

    Each start keeps its own logs (and the dynamo stack needs a fresh discovery folder).
    """
    if not run_dir.exists() or not any(run_dir.iterdir()):
        return run_dir
    n = 2
    while (run_dir / f"start-{n}").exists():
        n += 1
    return run_dir / f"start-{n}"
