"""Agent programs: any agent written against an OpenAI-compatible client, trained as it is.

`AgentProgram(fn, policy)` runs `fn(row, llm)` against an endpoint over the run's engine
(endpoint.py); each episode's calls (sessions.py) become exact trajectories (assembly.py).
"""

from rlfactory_nb.programs.assembly import expand_segments, program_metrics, segment_trajectories
from rlfactory_nb.programs.endpoint import Endpoint
from rlfactory_nb.programs.handle import LLM, EpisodeTools, ProgramSettings
from rlfactory_nb.programs.play import ProgramSession
from rlfactory_nb.programs.program import AgentProgram
from rlfactory_nb.programs.sessions import CallRecord, CallSession

__all__ = [
    "LLM",
    "AgentProgram",
    "CallRecord",
    "CallSession",
    "Endpoint",
    "EpisodeTools",
    "ProgramSession",
    "ProgramSettings",
    "expand_segments",
    "program_metrics",
    "segment_trajectories",
]
