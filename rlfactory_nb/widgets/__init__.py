"""Jupyter views over the package's plain objects (ipywidgets + plotly FigureWidget).

Each view only draws an object that works without it: a Trajectory, an AgentSession, a ToolSet, a
RewardLab, a TrainingJob, an EvalReport, a Cluster. Errors raised in a view's callbacks are shown in
the view's own Output area.
"""

from rlfactory_nb.widgets.cluster import ClusterView
from rlfactory_nb.widgets.dashboard import TrainingDashboard
from rlfactory_nb.widgets.reward_lab import RewardLab, RewardLabView
from rlfactory_nb.widgets.stepper import RolloutStepper
from rlfactory_nb.widgets.tools import ToolSetView
from rlfactory_nb.widgets.trajectory import TrajectoryView

__all__ = ["ClusterView", "RewardLab", "RewardLabView", "RolloutStepper", "ToolSetView", "TrainingDashboard", "TrajectoryView"]
