"""Every error rlfactory-nb raises to a user, in one tree: `except rf.RLFactoryError` catches them all.

    RLFactoryError
    ├── ConfigError (ValueError): ChatFormatError, RegistryKeyError (KeyError),
    │                             MissingExtraError (ImportError), LoadError (ImportError), TokenizerMismatch
    ├── ArgumentTypeError (TypeError)
    ├── DataError: DatasetError (ValueError), ObjectTransferError (TypeError),
    │              UntrustedRunObjects (PermissionError)
    ├── ModelError: ModelFilesError (FileNotFoundError), RemoteCodeError, UnsupportedModelError (ValueError),
    │               CheckpointError (RuntimeError), NoCheckpointYet (CheckpointError, IndexError)
    ├── EngineError: EngineUnavailableError (ImportError), EngineActorDied, InsufficientResources,
    │                ChatError, EngineStateError (RuntimeError), EngineRequestError (ValueError),
    │                EngineTimeout (TimeoutError)
    ├── ToolError: ServerStartError, ServerUnavailable, HandshakeError (RuntimeError),
    │              InvalidArguments, QueryError (ValueError)
    ├── RolloutError: TemplateError, TemplateBoundError (ValueError), DriftError, EpisodeError (RuntimeError)
    ├── ScoringError: RewardError, RewardWorkerError, LabNotSampled (RuntimeError),
    │                 JudgeError (RuntimeError): JudgeParseError (also ValueError),
    │                 InvalidRewardValue, SampleError, RewardModelError (ValueError),
    │                 RewardLoadError (a LoadError too), RewardTimeout (TimeoutError)
    ├── HungCallsError (RuntimeError)
    ├── TrainingError (RuntimeError): StepFailed, StaleSamples, EnvironmentFailed
    ├── ClusterError (RuntimeError): JobFailed, JobExistsError, ModelMismatch, ShippingError,
    │                                JobTimeout (TimeoutError): DriverTimeout
    └── StorageError (OSError): PathNotFoundError (FileNotFoundError),
                                FolderExistsError (FileExistsError): RunFolderExistsError, RunExistsError

One base per family (what failed), and each error keeps the built-in it had before (what kind of
failure), so an `except ValueError` written against an earlier version catches what it caught. A
family base subclasses a built-in only where every member shares it; in the mixed families a shared
built-in would make, say, `except RuntimeError` start catching a SampleError.

The modules that raise these import them from here (and their old names still work: `from
rlfactory_nb.rewards.judge import JudgeError`). Standard library only, so any module, a tool server
included, can import it without loading torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class RLFactoryError(Exception):
    """The root: every error rlfactory-nb raises on purpose; `except rf.RLFactoryError` catches them all."""


class ConfigError(RLFactoryError, ValueError):
    """A config (file, overrides or papermill parameters) has problems, each naming its key and the fix."""

    def __init__(self, problems: list[str] | str, source: str = ""):
        if isinstance(problems, str):  # one wrong setting or argument, said in one sentence
            self.problems = [problems]
            super().__init__(problems)
            return
        self.problems = problems
        where = f" in {source}" if source else ""
        super().__init__(f"invalid config{where}:\n" + "\n".join(f"  - {p}" for p in problems))


class RegistryKeyError(ConfigError, KeyError):
    """A name no registry holds (a loss, a backend, a reward of a lab); the message lists the known ones."""

    def __str__(self) -> str:
        return Exception.__str__(self)  # KeyError's own would quote the message


class MissingExtraError(ConfigError, ImportError):
    """A setting needs a package that is not installed (e.g. wandb_project); the message says what to install."""


class LoadError(ConfigError, ImportError):
    """A `module:name` or `file.py:name` that loads nothing (code_names.py); `key` is the setting or
    argument that named it, and the message says what is wrong and the fix."""

    def __init__(self, message: str, key: str):
        self.key = key
        super().__init__(message)


class ArgumentTypeError(RLFactoryError, TypeError):
    """A function was given an argument of the wrong kind; the message says what it takes."""


class TokenizerMismatch(ConfigError):
    """Two models that must share token ids do not (a distillation teacher and its student); the
    message names both tokenizers and where they differ."""


class ChatFormatError(ConfigError):
    """No model family fits: an unknown `rollout.chat_format`, or a chat template `auto` cannot place."""

    def __init__(self, message: str):
        super().__init__([message], "rollout.chat_format")


class DataError(RLFactoryError):
    """A run's inputs (dataset rows, objects sent from the kernel) cannot be used; the message names which."""


class DatasetError(DataError, ValueError):
    """A dataset cannot be read, or a row lacks the columns training needs; the message names file:line."""


class ObjectTransferError(DataError, TypeError):
    """An object given to launch / train_sync cannot be pickled to the cluster; the message says which."""


class UntrustedRunObjects(DataError, PermissionError):
    """A run folder's objects.pkl, or the run config a checkpoint keeps, lacks this user's signature
    (signing.py); the message says why and how to proceed."""


class ModelError(RLFactoryError):
    """A stored model (its files, the code it needs, a checkpoint) cannot be loaded or written."""


class ModelFilesError(ModelError, FileNotFoundError):
    """A model's files are missing or partial on this node; the message names the file and the node."""


class UnsupportedModelError(ModelError, ValueError):
    """A model or adapter folder that lacks what rlfactory-nb needs of it; the message says what."""


class RemoteCodeError(ModelError, ValueError):
    """A model folder needs Python code of its own to load, and `model.trust_remote_code` is off."""


class CheckpointError(ModelError, RuntimeError):
    """A checkpoint could not be written or read; the message says which and what to do."""


class NoCheckpointYet(CheckpointError, IndexError):
    """`job.checkpoints[-1]` before the run saved one: the message names the run and how to wait."""


class EngineError(RLFactoryError):
    """A rollout engine cannot be made, placed on the cluster, or reached any more."""


class EngineUnavailableError(EngineError, ImportError):
    """An engine kind whose backend package is not installed; the message says how to install it."""


class EngineActorDied(EngineError, RuntimeError):
    """The engine actor behind a ClusterEngine died; `cluster.engine(...)` makes a new one."""


class InsufficientResources(EngineError, RuntimeError):
    """The cluster has not the CPUs or GPUs an engine asks for (or none is free); the message names both."""


class EngineStateError(EngineError, RuntimeError):
    """An engine that cannot serve now: closed, failed to start, or its backend ended a request early."""


class EngineRequestError(EngineError, ValueError):
    """A request an engine cannot serve (token ids outside the vocabulary, too long for the model)."""


class EngineTimeout(EngineError, TimeoutError):
    """An engine did not become ready in its time limit; the message names it and the limit."""


class ChatError(EngineError, RuntimeError):
    """Another model (an LLM judge, a model tool) gave no usable chat reply: its endpoint was down,
    slow, refusing or sent something unreadable, or its engine failed; the message says which."""


class ToolError(RLFactoryError):
    """A tool server cannot serve, or arguments cannot reach it (a tool's own failure is a ToolResult)."""


class ServerStartError(ToolError, RuntimeError):
    """A server did not start; the message names it and quotes the end of its stderr."""


class ServerUnavailable(ToolError, RuntimeError):
    """A server cannot answer (not started, crashed during the call, stopped, or failed to restart)."""


class HandshakeError(ToolError, RuntimeError):
    """A server's (re)start missed a bound of the handshake: no retry, the server is marked failed."""


class InvalidArguments(ToolError, ValueError):
    """Arguments no tool can be given (not valid Unicode, too deep, not JSON): the caller's fault."""


class QueryError(ToolError, ValueError):
    """A SQL query the read-only SQL tool refused or could not finish (examples/nl2sql); its message
    is what the model reads."""


class RolloutError(RLFactoryError):
    """A rollout cannot be assembled from the chat template and the engine's token ids."""


class TemplateError(RolloutError, ValueError):
    """The chat template cannot be extended turn by turn (it rewrites earlier turns)."""


class TemplateBoundError(RolloutError, ValueError):
    """A chat template asked for a value past the bounds of its sandbox (rollout/template_bounds.py)."""


class DriftError(RolloutError, RuntimeError):
    """drift_check="strict" and a rollout's ids differ from a full render of its messages ("warn" logs it)."""


class EpisodeError(RolloutError, RuntimeError):
    """An episode's environment failed (create, reset, a tool, respond, reward, close) or ran past the
    episode timeout; `kind` says where. The rollout loop records it in the trajectory and goes on."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(f"environment failed in {kind}: {message}")


class ScoringError(RLFactoryError):
    """A reward function, LLM judge or reward model cannot be loaded or cannot score a sample."""


class RewardError(ScoringError, RuntimeError):
    """Reward functions failed and the runner was told to fail the step (`on_error="fail"`), listing each."""

    def __init__(self, failures: Sequence[Any]):
        self.failures = failures
        """the `RewardFailure` records (rewards/runner.py), one per function and sample"""
        shown = "\n".join(f"  - {failure}" for failure in failures[:5])
        more = f"\n  ... and {len(failures) - 5} more" if len(failures) > 5 else ""
        super().__init__(f"{len(failures)} reward failure(s):\n{shown}{more}")


class InvalidRewardValue(ScoringError, ValueError):
    """A reward function returned something that is not a reward; the message says what to return."""


class RewardLoadError(LoadError, ScoringError):
    """A reward spec (`file.py:function`, `module:function`) that does not name a callable, or a
    factory (`reward.args`) that does not return one: a LoadError of the scoring family."""


class JudgeError(ScoringError, RuntimeError):
    """The judge endpoint gave no usable reply (down, slow, refusing, too large, or not valid JSON)."""


class JudgeParseError(JudgeError, ValueError):
    """The judge model replied, but the reply holds no score the parser can read (a JudgeError, so
    `except rf.JudgeError` catches every judge failure)."""


class SampleError(ScoringError, ValueError):
    """A sample a reward cannot score as given (no ground truth, a ground truth of the wrong shape)."""


class RewardWorkerError(ScoringError, RuntimeError):
    """A reward run in a worker process failed there, or the worker process ended."""


class RewardTimeout(ScoringError, TimeoutError):
    """A reward in a worker process gave no result within its time limit (the worker was stopped)."""


class LabNotSampled(ScoringError, RuntimeError):
    """A RewardLab asked for scores before `await lab.sample(...)` drew any rollouts."""


class RewardModelError(ScoringError, ValueError):
    """A reward model that cannot be loaded or used as asked; the message names the folder."""


class HungCallsError(RLFactoryError, RuntimeError):
    """Too many calls of one kind of the user's blocking code (tools, environments, programs,
    rewards) still run after their callers gave up on them: new calls of that kind are refused
    (rlfactory_nb/_threads.py)."""


class TrainingError(RLFactoryError, RuntimeError):
    """A training step cannot go on; the message says whether and how to resume."""


class StepFailed(TrainingError):
    """The backend failed during a step (e.g. a worker process died); the message says how to resume."""


class StaleSamples(TrainingError):
    """Samples from weights other than their label says, or outside the staleness bound; not trained on."""


class EnvironmentFailed(TrainingError):
    """Every episode of a training step failed in its environment, or a run trained no group because
    its episodes failed before the model's first token; the message carries the environment's own
    error. `kind` is where it failed (create, reset, a tool, ...), as EpisodeError says it."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(message)


class ClusterError(RLFactoryError, RuntimeError):
    """A job on a Ray cluster cannot be launched, shipped, or run to its end."""


class JobFailed(ClusterError):
    """The training driver raised; the message holds its traceback (also in job.logs())."""


class JobExistsError(ClusterError):
    """A job of that name is still running on the cluster: attach to it, stop it, or choose another name."""


class ModelMismatch(ClusterError):
    """The driver's node resolves the run's model to other files than the kernel did; the message says why."""


class JobTimeout(ClusterError, TimeoutError):
    """A job did not reach the awaited state (or hand over its weights) within the time limit."""


class DriverTimeout(JobTimeout):
    """A job's driver did not answer within the time limit: the cluster is busy, or the driver is still
    starting. Try again, or pass a longer `timeout_s` (`TrainingJob.attach(..., timeout_s=...)`)."""


class ShippingError(ClusterError):
    """Something the job needs cannot be shipped to the cluster; the message names it."""


class StorageError(RLFactoryError, OSError):
    """A run's storage (output_dir: a path or a URI, storage.py) cannot be reached, written or read;
    the message names the location and what failed."""


class PathNotFoundError(StorageError, FileNotFoundError):
    """A file or folder the call needs is not there (a run's checkpoint, an example, a job's folder)."""


class FolderExistsError(StorageError, FileExistsError):
    """A folder that would be written already exists; the message says how to keep or replace it."""


class RunFolderExistsError(FolderExistsError):
    """The run's folder already holds a run: resume it, replace it, or choose another name."""


class RunExistsError(FolderExistsError):
    """A run folder on storage already holds a run that this call would start over: resume it, or
    replace it (`replace=True`)."""
