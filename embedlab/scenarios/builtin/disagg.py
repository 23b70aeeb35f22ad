"""prefill-decode: disaggregated serving, proven from the workers' counters.

A disaggregated deployment splits each request in two: a prefill worker computes the prompt's
KV cache and hands it on, a decode worker generates from it (Dynamo's `--disaggregation-mode`,
its mocker included). Both count the request on their own counter, so one burst of new prompts
proves, per stage, what dynamo #12864 found only by scraping each prefill pod by hand:

- every request is counted exactly once on a prefill worker and once on a decode worker
  (less: some skipped a stage or never reached it; more: a stage served some twice);
- every prefill worker and every decode worker takes part (#12864: 83/78/5/0/0), once the
  new prompts outnumber each stage's workers enough that a router placing them at random
  leaves one out with probability below `PARTICIPATION_MISS`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

from ...cluster.deployment import Deployment
from ...cluster.spec import STAGES
from ...errors import ConfigError
from ...evidence.clients import run_sync
from ...evidence.prompts import distinct_prompts
from ...evidence.target import Target, target_of
from ...verdicts import Verdict
from ..burst import BurstSpec, judge, run_burst, serving, workers_of
from ..params import knob, with_knobs
from ..registry import Scenario
from ..result import Burst, DataFigures, ScenarioResult
from .kv import KINDS, check_kind, model_path, on_plan, participation_requests

__all__ = ["PrefillDecodeParams", "StageFigures", "prefill_decode"]


@dataclass(frozen=True, kw_only=True)
class PrefillDecodeParams:
    requests: int = knob(
        0, "prompts that share nothing (0: enough that a random router misses a worker of either "
        "stage < 0.1 %)", min=0,
    )  # fmt: skip
    prompt_tokens: int = knob(128, "tokens of each prompt", min=1)
    kind: str = knob("completions", "the request type: completions or chat", choices=KINDS)
    concurrency: int = knob(1, "requests in flight at once", min=1)


@dataclass(frozen=True)
class StageFigures(DataFigures):
    """Each stage's workers and what their counters rose by, beside the requests answered."""

    answered: int
    stages: dict[str, dict[str, float]]  # stage -> worker index -> its counter's rise

    def rows(self) -> list[tuple[str, str]]:
        return [
            (
                stage,
                ", ".join(f"worker {i} +{d:g}" for i, d in split.items())
                + f" ({sum(split.values()):g} counted for {self.answered} answered)",
            )
            for stage, split in self.stages.items()
        ]

    def key_figures(self) -> dict[str, Any]:
        return {
            f"{stage} workers that took part": f"{sum(1 for d in split.values() if d)} of {len(split)}"
            for stage, split in self.stages.items()
        }


def _stages(target: Deployment | Target, indices: list[int]) -> dict[str, list[int]]:
    """Stage -> the indices of its workers, from the deployment embedlab launched."""
    if not isinstance(target, Deployment):
        raise ConfigError(
            "prefill-decode reads each worker's stage from the deployment it launched; an attached "
            "deployment does not say which worker prefills"
        )
    found = {stage: [i for i in indices if target.spec.workers[i].stage == stage] for stage in STAGES}
    if not all(found.values()):
        raise ConfigError(
            "prefill-decode needs a disaggregated deployment: prefill and decode workers "
            "(--prefill-workers N, or WorkerSpec.stage)"
        )
    return found


def _stage_reasons(stage: str, split: dict[int, float], answered: int) -> list[str]:
    """What is wrong with one stage's counts: a total other than the requests answered, a still worker."""
    reasons = []
    counted = sum(split.values())
    if counted > answered:
        reasons.append(
            f"the {stage} workers counted {counted:g} for {answered} requests answered: some were "
            f"served twice at the {stage} stage"
        )
    elif counted < answered:
        reasons.append(
            f"the {stage} workers counted {counted:g} for {answered} requests answered: "
            f"{answered - counted:g} never reached a {stage} worker"
        )
    still = [i for i, d in split.items() if not d]
    if still:
        reasons.append(
            f"{', '.join(f'worker {i}' for i in still)} ({stage}) took no part in {answered} new prompts"
        )
    return reasons


def prefill_decode(
    target: Deployment | Target,
    *,
    params: PrefillDecodeParams | None = None,
    model: str | None = None,
    progress: bool = False,
    **knobs: Any,
) -> ScenarioResult:
    """New prompts through a disaggregated pool: each counted once per stage, every worker of each stage used."""
    params = with_knobs(PrefillDecodeParams, params, knobs, scenario="prefill-decode")
    check_kind(params.kind)
    model, indices = serving(target, model)
    stages = _stages(target, indices)
    started = time.monotonic()
    n = params.requests or max(participation_requests(len(w)) for w in stages.values())
    prompts = distinct_prompts(
        n, tokens=params.prompt_tokens, nonce=secrets.token_hex(4), model_path=model_path(target, indices)
    )
    found = target_of(target)
    spec = BurstSpec(
        name=f"{model}: {n} new prompts",
        model=model,
        expected=frozenset(indices),
        requests=n,
        min_total_delta=len(stages) * n,
        concurrency=params.concurrency,
        inputs=prompts,
        kind=params.kind,
        require_all=True,
        rule="each request counted once on a prefill worker and once on a decode worker; every worker takes part",
    )
    burst: Burst = run_sync(run_burst(found, spec, progress=progress))
    verdict, reasons = judge([burst], exact_total=False)
    answered = burst.traffic.n - len(burst.traffic.failures)
    splits = {stage: {i: burst.delta(i) or 0.0 for i in workers} for stage, workers in stages.items()}
    if verdict in (Verdict.PASSED, Verdict.FAILED):
        found_wrong = [r for stage, split in splits.items() for r in _stage_reasons(stage, split, answered)]
        if found_wrong:
            # The check's own reasons repeat the still workers; the stage's say which stage.
            verdict, reasons = Verdict.FAILED, [*found_wrong, *(r for r in reasons if "no traffic" not in r)]
        elif verdict is Verdict.PASSED:
            reasons = [
                f"each of {n} new prompts was counted once by a prefill worker and once by a decode "
                f"worker, and all {len(stages['prefill'])} prefill and {len(stages['decode'])} decode "
                "workers took part"
            ]
    miss = max(len(w) * (1 - 1 / len(w)) ** n for w in stages.values())
    return ScenarioResult(
        scenario="prefill-decode",
        stack=found.stack,
        params={**asdict(params), "model": model, "requests": n},
        workers=workers_of(target),
        bursts=[burst],
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        power=f"a request counted twice or skipped at either stage is caught, and a worker of either "
        f"stage left out of {n} new prompts; a correct random router is accused with probability "
        f"{miss:.2%} at most",
        figures=StageFigures(
            answered=answered, stages={s: {str(i): d for i, d in sp.items()} for s, sp in splits.items()}
        ),
    )


PREFILL_DECODE = Scenario(
    name="prefill-decode", run=on_plan(prefill_decode), params=PrefillDecodeParams,
    deployment={"router_mode": "kv", "workers": 4, "prefill_workers": 2, "endpoints": "model"},
    help="new prompts through prefill and decode pools: each counted once per stage, every worker of "
    "each stage takes part (dynamo #12864)",
)  # fmt: skip
