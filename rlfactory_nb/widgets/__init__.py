"""Jupyter views over the package's plain objects (ipywidgets + plotly FigureWidget).

Each view only draws an object that works without it: a Trajectory, a ToolSet, a RewardLab, a
TrainingJob, an EvalReport, a PolicyComparison, a Cluster. Each widget module registers its view for the type it draws
(widgets/registry.py); `view_for(obj)` is the one dispatch, and `obj.view()` reaches it without the
core importing any widget module. Errors raised in a view's callbacks are shown in the view's own
Output area.
"""

from rlfactory_nb.cluster.jobs import TrainingJob
from rlfactory_nb.widgets import eval as _eval_views  # noqa: F401  (registers the EvalReport views)
from rlfactory_nb.widgets.cluster import ClusterView
from rlfactory_nb.widgets.compare import ComparisonView
from rlfactory_nb.widgets.dashboard import TrainingDashboard
from rlfactory_nb.widgets.registry import register_view, view_for
from rlfactory_nb.widgets.reward_lab import RewardLabView
from rlfactory_nb.widgets.stepper import RolloutStepper
from rlfactory_nb.widgets.tools import ToolSetView
from rlfactory_nb.widgets.trajectory import TrajectoryView

register_view(TrainingJob)(TrainingDashboard)  # `job.dashboard()`; dashboard.py has no registry import

__all__ = [
    "ClusterView",
    "ComparisonView",
    "RewardLabView",
    "RolloutStepper",
    "ToolSetView",
    "TrainingDashboard",
    "TrajectoryView",
    "register_view",
    "view_for",
]
