"""ComparisonView: where two policies differ on the same trajectory, token by token.

The token strip of the trajectory view with a second axis: prompt, template and tool tokens stay grey;
each sampled token is coloured by its change in log-probability (after - before) on a diverging scale
centred at 0 (blue: the new policy makes it more likely, red: less; the strongest colour is the largest
|change| of the whole comparison, so strips compare across trajectories). Hovering a token shows both
log-probs and both probabilities. Beside it: a bar per turn of the summed change, a selector over the
trajectories sorted by total change, the top-tokens table, and what the numbers do not say.

The HTML builders are plain functions: the widget, its static rendering (exported notebooks, papermill)
and `rlfactory-nb compare`'s page are the same markup, drawn without a network.
"""

from __future__ import annotations

import html
import math
from typing import Any

import ipywidgets as widgets

from rlfactory_nb.compare import PolicyComparison
from rlfactory_nb.rollout.display import MASKED_COLOR
from rlfactory_nb.widgets._base import StaticFallback
from rlfactory_nb.widgets.registry import register_view
from rlfactory_nb.widgets.static import Chart, Series, svg_chart

MORE, LESS = (33, 102, 172), (178, 24, 43)
"""the diverging scale's ends (RdBu): more likely after training, less likely"""
CAVEAT = (
    "A change is log p<sub>after</sub> − log p<sub>before</sub> of one token <i>in this fixed trajectory</i>: "
    "both policies score the same ids, so sampling noise plays no part. It does not say the policy prefers "
    "the token in general: a token can become more likely because the context before it now reads "
    "differently to the new policy, and a trajectory the new policy would never sample is scored all the same."
)
_STYLE = f"""<style>
.rf-comparison {{ font-family: sans-serif; font-size: 13px; }}
.rf-strip {{ font-family: monospace; font-size: 90%; line-height: 1.7; white-space: pre-wrap; }}
.rf-token {{ border-radius: 2px; padding: 0 1px; }}
.rf-masked {{ background: {MASKED_COLOR}; color: #555; }}
.rf-caveat {{ color: #555; font-size: 90%; max-width: 900px; }}
.rf-table td, .rf-table th {{ padding: 2px 8px; text-align: right; }}
</style>"""


def change_color(change: float, scale: float) -> str:
    """The diverging colour of `change` when `scale` is the largest |change| (white at 0).

    >>> change_color(0.0, 1.0), change_color(1.0, 1.0), change_color(-2.0, 1.0)
    ('rgb(255,255,255)', 'rgb(33,102,172)', 'rgb(178,24,43)')
    """
    weight = min(abs(change) / scale, 1.0) if scale > 0 else 0.0
    end = MORE if change > 0 else LESS
    return "rgb({},{},{})".format(*(round(255 + (channel - 255) * weight) for channel in end))


def strip_html(comparison: PolicyComparison, index: int) -> str:
    """Trajectory `index`'s prompt and response tokens; sampled ones coloured by their change."""
    traj = comparison.trajectories[index]
    rows = comparison.trajectory_tokens(index).set_index("position")
    scale = _scale(comparison)
    spans = []
    for position, (token_id, mask) in enumerate(zip(traj.response_ids, traj.loss_mask)):
        spans.append(_coloured(rows.loc[position], scale) if mask else _grey(token_id, comparison.tokenizer, "not sampled"))
    # the strip starts at the first sampled token; the prompt (a whole system prompt, often) folds away
    prompt = "".join(_grey(token_id, comparison.tokenizer, "prompt") for token_id in traj.prompt_ids)
    folded = (
        f"<details class='rf-prompt'><summary>the prompt ({len(traj.prompt_ids)} tokens, not scored): show</summary>"
        f"<div class='rf-strip'>{prompt}</div></details>"
    )
    legend = (
        f"<div>colour: change in log-probability, <span class='rf-token' style='background:{change_color(scale, scale)};color:#fff'>"
        f"+{scale:.2f} more likely</span> … 0 … <span class='rf-token' style='background:{change_color(-scale, scale)};color:#fff'>"
        f"−{scale:.2f} less likely</span> <span class='rf-token rf-masked'>prompt, template and tool tokens</span></div>"
    )
    return f"{legend}{folded}<div class='rf-strip'>{''.join(spans)}</div>"


def _coloured(row: Any, scale: float) -> str:
    before, after, change = row["logprob_before"], row["logprob_after"], row["change"]
    title = (
        f"id {row['token_id']}, turn {row['turn']}: log p before {before:.3f} (p {math.exp(before):.3f}), "
        f"after {after:.3f} (p {math.exp(after):.3f}), change {change:+.3f}"
    )
    color = "#fff" if abs(change) > 0.6 * scale else "#000"
    return (
        f"<span class='rf-token rf-change' data-change='{change:.4f}' title='{html.escape(title, quote=True)}' "
        f"style='background:{change_color(change, scale)};color:{color}'>{_text(row['token'])}</span>"
    )


def _grey(token_id: int, tokenizer: Any, what: str) -> str:
    text = tokenizer.decode([token_id]) if tokenizer is not None else f"[{token_id}]"
    return f"<span class='rf-token rf-masked' title='id {token_id}, {what}'>{_text(text)}</span>"


def _text(text: str) -> str:
    return html.escape(text).replace("\n", "↵\n")


def _scale(comparison: PolicyComparison) -> float:
    changes = comparison.tokens["change"]
    return float(changes.abs().max()) if len(changes) else 0.0


def turns_svg(comparison: PolicyComparison, index: int) -> str:
    """A bar per assistant turn of trajectory `index`: its summed change."""
    turns = comparison.turns[comparison.turns["trajectory"] == index]
    series = Series("summed change", tuple(f"turn {t + 1}" for t in turns["turn"]), tuple(turns["change"]), kind="bar")
    return svg_chart(Chart("summed change per turn (nats)", (series,), empty_note="no sampled tokens"), width=360, height=200)


def header_html(comparison: PolicyComparison, index: int) -> str:
    row = comparison.summary[comparison.summary["trajectory"] == index].iloc[0]
    name = f" ({html.escape(str(row['id']))})" if row["id"] else ""
    return (
        f"<div><b>{html.escape(comparison.before)}</b> → <b>{html.escape(comparison.after)}</b> · trajectory {index}{name} · "
        f"{row['tokens']} sampled tokens · total change {row['change']:+.3f} nats · KL estimate {row['kl']:.3f}</div>"
    )


def top_html(comparison: PolicyComparison, n: int = 10) -> str:
    top = comparison.top_tokens(n)
    if top.empty:
        return "<div>no token's log-probability changed</div>"
    shown = top.assign(token=top["token"].map(repr))[["direction", "token", "count", "change", "mean_change", "mean_prob_before", "mean_prob_after"]]
    table = shown.to_html(index=False, float_format=lambda value: f"{value:.3f}", classes="rf-table", border=0)
    return f"<div><b>what the policy now says more, and less</b> (summed over {len(comparison.trajectories)} trajectories)</div>{table}"


def trajectory_html(comparison: PolicyComparison, index: int) -> str:
    return f"{header_html(comparison, index)}{turns_svg(comparison, index)}{strip_html(comparison, index)}"


def page_html(comparison: PolicyComparison, index: int | None = None) -> str:
    """The whole comparison as one offline HTML fragment: trajectory `index` (None: the one whose
    total change is largest), the top tokens and the caveat (the widget's static rendering, and
    `rlfactory-nb compare`'s page)."""
    index = int(comparison.summary["trajectory"].iloc[0]) if index is None else index
    body = f"{trajectory_html(comparison, index)}{top_html(comparison)}<p class='rf-caveat'>{CAVEAT}</p>"
    return f"{_STYLE}<div class='rf-comparison'>{body}</div>"


@register_view(PolicyComparison)
class ComparisonView(StaticFallback, widgets.VBox):
    """A widget over a PolicyComparison: a selector of trajectories (sorted by total change), the
    selected one's per-turn bars and coloured strip, the top tokens, the caveat."""

    def __init__(self, comparison: PolicyComparison):
        self.comparison = comparison
        options = [
            (f"{row.trajectory}{f' ({row.id})' if row.id else ''}: {row.change:+.3f} nats", int(row.trajectory))
            for row in comparison.summary.itertuples()
        ]
        self.selector = widgets.Dropdown(options=options, description="trajectory")
        self.trajectory = widgets.HTML()
        self.selector.observe(self._show, names=["value"])
        rest = widgets.HTML(f"{_STYLE}<div class='rf-comparison'>{top_html(comparison)}<p class='rf-caveat'>{CAVEAT}</p></div>")
        super().__init__([self.selector, self.trajectory, rest])
        self.add_class("rf-comparison-view")
        self._show({"new": self.selector.value})

    def _show(self, change: dict[str, Any]) -> None:
        self.trajectory.value = f"{_STYLE}<div class='rf-comparison'>{trajectory_html(self.comparison, change['new'])}</div>"

    def static_html(self) -> str:
        return page_html(self.comparison, self.selector.value)
