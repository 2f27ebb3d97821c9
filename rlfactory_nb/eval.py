"""`rf.evaluate`: how well a model (a checkpoint, a preset, or a loaded Policy) does on held-out prompts.

One rollout per prompt at the run's temperature ("sampled") and one greedy (temperature 0), both
scored by the run's reward function, with the same tools, parser and limits as training. Both are
reported because they disagree on small models: right after a warm-start the greedy choice can be
to never call the tool while a sampled rollout often does. The result is a plain
record (`EvalReport`) with a per-sample table; `.view()` draws it and `.compare(base)` sets two
reports side by side. `rlfactory-nb eval CONFIG --model PATH` is the same from a shell.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlfactory_nb._async import run_sync
from rlfactory_nb._views import cell_text, html_table, view_of
from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.data.rows import Row, load_rows
from rlfactory_nb.engines.base import Engine
from rlfactory_nb.models.checkpoint import CHECKPOINTS
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.rewards.runner import RewardOutcome, RewardRunner
from rlfactory_nb.rewards.values import RewardFunction
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.rollout.player import EpisodePlayer
from rlfactory_nb.runtime import Runtime
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.tools.extra import ExtraTools
from rlfactory_nb.train.metrics import reward_metrics, rollout_metrics
from rlfactory_nb.types import Sample, Trajectory

if TYPE_CHECKING:
    import pandas as pd

MODES = ("sampled", "greedy")
SUMMARY_KEYS = ("sampled_reward", "greedy_reward", "tool_call_rate", "tool_success_rate", "parse_errors_per_sample", "turns_mean")
BETTER = {"sampled_reward": 1, "greedy_reward": 1, "tool_call_rate": 1, "tool_success_rate": 1, "parse_errors_per_sample": -1, "turns_mean": 0}
"""which way a summary value gets better: up (1), down (-1), neither (0: more turns is no gain or loss)"""


class Summary(dict[str, float]):
    """`report.summary()`: a dict of the headline values, shown as a table rounded to 3 places."""

    def __repr__(self) -> str:
        return "\n".join(f"{key:<24} {cell_text(value):>8}" for key, value in self.items())

    def _repr_html_(self) -> str:
        return html_table(["value", *self], [["", *self.values()]], "summary", height_px=None).replace(
            "<td></td>", "<td><b>mean</b></td>", 1
        )


@dataclass(frozen=True)
class EvalRow:
    index: int
    question: str
    ground_truth: Any
    sampled_answer: str
    sampled_reward: float
    greedy_answer: str
    greedy_reward: float
    tool_calls: int
    """calls made in the sampled rollout"""


@dataclass(frozen=True)
class EvalReport:
    label: str
    sampled_reward: float
    """mean reward of one sampled rollout per prompt"""
    greedy_reward: float
    """mean reward of the greedy rollout per prompt"""
    tool_call_rate: float
    """share of sampled rollouts with at least one tool call"""
    tool_success_rate: float
    """share of tool calls (sampled rollouts) that returned status ok; 0 when none were made"""
    parse_errors_per_sample: float
    turns_mean: float
    rows: list[EvalRow]
    trajectories: dict[str, list[Trajectory]] = field(default_factory=dict, repr=False, compare=False)

    def summary(self) -> Summary:
        """The headline values (a dict; in a notebook, a table rounded to 3 places)."""
        return Summary({key: getattr(self, key) for key in SUMMARY_KEYS})

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, **self.summary(), "rows": [asdict(row) for row in self.rows]}

    def compare(self, other: EvalReport) -> EvalComparison:
        """`other` is the baseline: deltas are self minus other."""
        return EvalComparison(self, other)

    def table(self) -> pd.DataFrame:
        """One row per prompt (the EvalRow fields) as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame([asdict(row) for row in self.rows], columns=[f.name for f in fields(EvalRow)])

    def view(self) -> Any:
        """A notebook widget: the summary, the per-prompt table and a bar chart."""
        return view_of(self)

    def _repr_html_(self) -> str:
        return f"<div><b>{html.escape(self.label)}</b> on {len(self.rows)} prompts</div>{_summary_table([self])}{_rows_table(self.rows)}"


@dataclass(frozen=True)
class EvalComparison:
    new: EvalReport
    base: EvalReport

    def deltas(self) -> dict[str, float]:
        return {key: getattr(self.new, key) - getattr(self.base, key) for key in SUMMARY_KEYS}

    def changed(self) -> list[tuple[EvalRow, EvalRow]]:
        """Prompts (paired by position) whose sampled or greedy reward differs between the two."""
        return [
            (new, base)
            for new, base in zip(self.new.rows, self.base.rows)
            if (new.sampled_reward, new.greedy_reward) != (base.sampled_reward, base.greedy_reward)
        ]

    def better(self) -> list[tuple[EvalRow, EvalRow]]:
        """Changed prompts whose sampled plus greedy reward rose."""
        return [(new, base) for new, base in self.changed() if _total(new) > _total(base)]

    def worse(self) -> list[tuple[EvalRow, EvalRow]]:
        """Changed prompts whose sampled plus greedy reward fell."""
        return [(new, base) for new, base in self.changed() if _total(new) < _total(base)]

    def verdicts(self) -> dict[str, str]:
        """key -> "better", "worse" or "same" for each summary value's change (`BETTER`)."""
        found = {}
        for key, delta in self.deltas().items():
            sign = (delta > 1e-12) - (delta < -1e-12)
            found[key] = "same" if sign == 0 or BETTER[key] == 0 else "better" if sign == BETTER[key] else "worse"
        return found

    def table(self) -> pd.DataFrame:
        """The summary of base, new and the change (new minus base), one row each."""
        import pandas as pd

        return pd.DataFrame([self.base.summary(), self.new.summary(), self.deltas()], index=[self.base.label, self.new.label, "change"])

    def view(self) -> Any:
        """A notebook widget: the two summaries side by side and a bar chart."""
        return view_of(self)

    def _repr_html_(self) -> str:
        verdicts = self.verdicts()
        change = ["change", *(f"{value:+.3f}" for value in self.deltas().values())]
        rows = [[r.label, *r.summary().values()] for r in (self.base, self.new)] + [change]
        classes = [[""] * len(change)] * 2 + [["", *(f"rf-{verdicts[key]}" for key in SUMMARY_KEYS)]]
        table = html_table(["", *SUMMARY_KEYS], rows, "reports and their change", height_px=None, classes=classes)
        better, worse = len(self.better()), len(self.worse())
        even = len(self.changed()) - better - worse
        counts = (
            f"<span class='rf-better'>{better} prompts better</span>, <span class='rf-worse'>{worse} worse</span>"
            + (f", {even} changed evenly (one mode up, the other down)" if even else "")
        )
        return (
            f"<div style='font-family:sans-serif'><b>{html.escape(self.new.label)}</b> vs <b>{html.escape(self.base.label)}</b> "
            f"on {len(self.new.rows)} prompts: {counts} (sampled plus greedy reward). In the change row "
            "<span class='rf-better'>green is better</span>, <span class='rf-worse'>red is worse</span> "
            "(fewer parse errors is better; turns are neither).</div>"
            f"{table}"
        )


HeldOut = dict[str, tuple[list[Trajectory], list[RewardOutcome]]]
"""mode ("sampled", "greedy") -> one trajectory per prompt and its reward outcome"""


EVAL_STEP = -1
"""the `SampleId.step` of every held-out rollout (training steps count from 1)"""


def held_out_ids(cfg: RunConfig) -> Callable[[int, int], SampleId]:
    """Names for held-out rollouts: (grpo.seed, EVAL_STEP, prompt, sample), the same at every
    evaluation, so one policy evaluated twice samples the same tokens and two policies (base and
    trained, two checkpoints) are compared on the same random numbers, whatever order requests ran in."""
    return lambda prompt, sample: SampleId(cfg.grpo.seed, EVAL_STEP, prompt, sample)


async def held_out_rollouts(
    cfg: RunConfig, agent_at: Callable[[float], EpisodePlayer], rows: Sequence[Row], reward: RewardRunner
) -> HeldOut:
    """The held-out pass `rf.evaluate` and `Trainer.evaluate` share: one rollout per prompt at the
    run's temperature ("sampled") and one greedy, by `agent_at(temperature)`, scored by `reward`."""
    results: HeldOut = {}
    for mode in MODES:
        temperature = cfg.rollout.temperature if mode == "sampled" else 0.0
        groups = await rollout_groups(
            agent_at(temperature), list(rows), 1, cfg.rollout.max_in_flight, sample_ids=held_out_ids(cfg)
        )
        outcomes = await reward.score_groups([[Sample.from_trajectory(group[0])] for group in groups])
        results[mode] = ([group[0] for group in groups], [scored[0] for scored in outcomes])
    return results


def held_out_metrics(results: HeldOut) -> dict[str, float]:
    """`eval/{mode}_reward/...` and `eval/{mode}/...` rows for the training metrics."""
    metrics: dict[str, float] = {}
    for mode, (trajectories, outcomes) in results.items():
        metrics.update(reward_metrics([o.score for o in outcomes], [], prefix=f"eval/{mode}_reward"))
        metrics.update(rollout_metrics(trajectories, prefix=f"eval/{mode}"))
    return metrics


async def evaluate(
    model: Policy | str | Path | Engine,
    dataset: Any = None,
    cfg: RunConfig | None = None,
    *,
    label: str | None = None,
    limit: int | None = None,
    reward: RewardFunction | Mapping[str, RewardFunction] | None = None,
    tools: ExtraTools | None = None,
    run_dir: str | Path | None = None,
    trust_run_objects: bool = False,
    agent: Any = None,
    env: Any = None,
) -> EvalReport:
    """Evaluate `model` (a Policy, a checkpoint folder, a preset name) on `dataset` (rows, a
    datasets.Dataset, a source such as "synthetic:calculator-heldout", or None: cfg.data.eval) with
    cfg's tools, rollout and reward. `reward` / `tools`: objects from the kernel, as `launch` takes
    them; `run_dir`: use the objects a run kept (runs/<name>/code/) where these are not given (only
    when signed by this user, or with `trust_run_objects`: data/objects.py). `env`: the Environment
    class or factory each held-out rollout gets an instance of (or "module:Class"), as `train_sync`
    and `launch` take it; it wins over the one the run kept and over `rollout.env`, and its reward
    is scored as training scored it (`rollout.env_reward`). `agent`: an rf.AgentProgram.
    `model` may also be an engine that carries its tokenizer (`cluster.engine(...)`, `job.engine()`):
    the rollouts run on it, and it stays open."""
    cfg = cfg or RunConfig(name="eval")
    kept = (RunObjects.load(run_dir, trust_run_objects) if run_dir is not None else None) or RunObjects()
    objects = RunObjects.of(reward, tools, env=env, agent=agent).filled_from(kept)
    given = model if isinstance(model, Engine) else None
    policy = None if given is not None else model if isinstance(model, Policy) else Policy.load(
        model, device=cfg.model.device, dtype=cfg.model.dtype, log=lambda _: None,
        trust_remote_code=cfg.model.trust_remote_code,
    )
    rows = _rows(dataset if dataset is not None else kept.eval_data, cfg, limit)
    objects = dataclasses.replace(objects, eval_data=rows)  # the rows the reward is checked against
    runtime = Runtime.from_config(cfg, objects, policy, engine=given)  # a given engine brings its tokenizer
    runtime.checked(rows, "dataset")
    runner = runtime.reward  # the rows, the reward and the tools file fail before an engine starts
    await runtime.start()
    engine = runtime.use(given or policy.engine(cfg.model.engine, seed=cfg.grpo.seed)).engine
    try:
        results = await held_out_rollouts(cfg, functools.partial(runtime.agent, drift="off"), rows, runner)
    finally:
        if given is None:
            await engine.close()
        await runtime.close()
    trajectories = {mode: trajs for mode, (trajs, _) in results.items()}
    scores = {mode: [o.score for o in outcomes] for mode, (_, outcomes) in results.items()}
    return _report(label or _label(model), rows, trajectories, scores)


def evaluate_sync(
    model: Policy | str | Path | Engine, dataset: Any = None, cfg: RunConfig | None = None, **options: Any
) -> EvalReport:
    return run_sync(evaluate(model, dataset, cfg, **options))


def _rows(dataset: Any, cfg: RunConfig, limit: int | None) -> list[Row]:
    if dataset is None or isinstance(dataset, str):
        size = limit if limit is not None else cfg.data.eval_size
        return load_rows(dataset or cfg.data.eval, size)
    return load_rows(dataset, limit, what="dataset")


def _label(model: Policy | str | Path | Engine) -> str:
    if isinstance(model, Engine):
        return str(getattr(model, "name", type(model).__name__))
    if isinstance(model, Policy):
        return model.name or str(model.path)
    path = Path(model)
    return f"{path.parent.parent.name}/{path.name}" if path.parent.name == CHECKPOINTS else str(model)


def _report(label: str, rows: list[dict[str, Any]], trajectories: dict[str, list[Trajectory]], scores: dict[str, list[float]]) -> EvalReport:
    sampled, greedy = trajectories["sampled"], trajectories["greedy"]
    results = [r for t in sampled for r in t.tool_results()]
    count = max(len(sampled), 1)
    table = [
        EvalRow(
            index=i,
            question=_question(s),
            ground_truth=row.get("ground_truth"),
            sampled_answer=Sample.from_trajectory(s).final_answer,
            sampled_reward=scores["sampled"][i],
            greedy_answer=Sample.from_trajectory(g).final_answer,
            greedy_reward=scores["greedy"][i],
            tool_calls=len(s.tool_calls()),
        )
        for i, (row, s, g) in enumerate(zip(rows, sampled, greedy))
    ]
    return EvalReport(
        label=label,
        sampled_reward=sum(scores["sampled"]) / count,
        greedy_reward=sum(scores["greedy"]) / count,
        tool_call_rate=sum(1 for t in sampled if t.tool_calls()) / count,
        tool_success_rate=sum(1 for r in results if r.ok) / len(results) if results else 0.0,
        parse_errors_per_sample=sum(len(turn.parse_errors) for t in sampled for turn in t.turns) / count,
        turns_mean=sum(t.num_turns for t in sampled) / count,
        rows=table,
        trajectories=trajectories,
    )


# ---------------------------------------------------------------------- drawing


def _question(traj: Trajectory) -> str:
    """The prompt's last message, as the rollout saw it (an environment may have written it)."""
    prompt = Sample.from_trajectory(traj).prompt
    return str(prompt[-1]["content"]) if prompt else ""


def _total(row: EvalRow) -> float:
    return row.sampled_reward + row.greedy_reward


def _summary_table(reports: list[EvalReport]) -> str:
    rows = [[r.label, *r.summary().values()] for r in reports]
    return html_table(["", *SUMMARY_KEYS], rows, "summary" if len(rows) == 1 else "reports", height_px=None)


def _rows_table(rows: list[EvalRow]) -> str:
    columns = ["index", "question", "ground_truth", "sampled_answer", "sampled_reward", "greedy_answer", "greedy_reward", "tool_calls"]
    return html_table(columns, [[getattr(row, c) for c in columns] for row in rows], "prompts", height_px=300)


# ---------------------------------------------------------------------- CLI


def run_eval_command(args: argparse.Namespace) -> int:
    cfg = RunConfig.from_yaml(args.config, overrides=args.overrides)
    report = evaluate_sync(args.model or cfg.model.name, None, cfg)
    print(_text_summary(report))
    if args.base:
        base = evaluate_sync(args.base, None, cfg)
        print(_text_summary(base))
        print("change: " + ", ".join(f"{k} {v:+.3f}" for k, v in report.compare(base).deltas().items()))
    return 0


def _text_summary(report: EvalReport) -> str:
    return f"{report.label}: " + ", ".join(f"{k} {cell_text(v)}" for k, v in report.summary().items())
