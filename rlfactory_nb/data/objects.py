"""Objects from the kernel that a run trains with instead of what its config names.

`launch(cfg, cluster, reward=..., tools=..., train_data=..., eval_data=...)` and `train_sync(cfg, ...)`
take a reward function (or a dict of named ones, as in the RewardLab), `@rf.tool` functions or a
ToolSet, and rows (a list of dicts or a `datasets.Dataset`). They travel by value: cloudpickle, as
Ray does for functions defined in `__main__`, and also for functions of the user's own modules (any
module outside site-packages and this package), so the driver needs neither the notebook nor those
files. What cannot be pickled (an open file, a lock, a client holding a socket) fails in the cell,
before anything starts, with an error naming the object and the variable it refers to.

The run folder keeps them, so that `TrainingJob.attach`, `launch(..., resume=True)` from a new kernel
and `rlfactory-nb train --resume` find them again:

    runs/<name>/code/objects.pkl     the pickled objects (what resume loads)
    runs/<name>/code/reward.py       their source, for people to read (also tools.py): each function
                                     under the user's own name, with the helpers it calls and the
                                     values it captured (what cloudpickle sent), never run
    runs/<name>/code/train_data.jsonl, eval_data.jsonl   the rows, readable

The run's own record says the same: the config a checkpoint keeps (`run_config.yaml`) is
`RunObjects.recorded(cfg)`, where `reward.function` reads `objects.pkl:<name>` for a reward from the
kernel, data files are the kept rows, and `kernel_objects` lists each object (name, module, the
sha256 of its readable source and the file holding it). A default the run never used is never named.

Loading objects.pkl runs the code it holds, so it is loaded only when it carries this user's
signature: `code/objects.sig.json` holds an HMAC-SHA256 of the pickle, keyed by a secret kept outside
every run folder (`key_file()`: ~/.config/rlfactory_nb/run_objects.key, made 0600 on first use). A
folder someone shared, or one whose pickle was swapped, is refused with `UntrustedRunObjects` before
a byte is unpickled, unless the caller passes `trust_run_objects=True` after reading code/reward.py
(or signs the folder for good with `trust_run_folder`). Objects sent from the kernel to a Ray driver
travel in memory and need no check; a resume reads the folder, so a driver on another node needs the
same key file (`$RLFACTORY_NB_KEY_FILE` may point at a shared one).

On resume the config wins: the signature file also records which reward, tools file, environment
(`rollout.env`) and agent program (`rollout.program`) the config named when the objects were saved,
and a resume whose config names another uses the config's instead of the pickled one
(`RunObjects.resumed`, which says which in one line). A folder signed before the environment and
program were recorded keeps its pickled ones.
To keep a pickled reward anyway, pass it: `train(cfg, resume=True, reward=RunObjects.load(run_dir).reward)`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cloudpickle  # the pickler Ray uses (it vendors a copy), without importing Ray here

from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.pickling import pickled_by_value, transfer_problem
from rlfactory_nb.data.readable import keep_source, own_name, readable_source, source_listing, user_modules
from rlfactory_nb.data.rows import Row, load_rows
from rlfactory_nb.envs.factory import env_factory
from rlfactory_nb.errors import ArgumentTypeError, ObjectTransferError
from rlfactory_nb.signing import (
    CONFIG_SIGNATURE_FILE,
    PICKLE_FILE,
    SIGNATURE_FILE,
    check_signature,
    config_signature,
    read_signature,
    write_signature,
)
from rlfactory_nb.storage import Storage, is_uri, join
from rlfactory_nb.tools.config import ToolsFile

if TYPE_CHECKING:
    from rlfactory_nb.tools.extra import ExtraTools

CODE_DIR = "code"


@dataclass(frozen=True)
class RunObjects:
    """The kernel's objects for one run; None fields fall back to the run config."""

    reward: Callable[..., Any] | dict[str, Callable[..., Any]] | None = None
    """the reward function, or named functions (the first trains; the others are logged)"""
    tools: ToolsFile | None = None
    """tools added to the config's tools file"""
    train_data: list[Row] | None = None
    eval_data: list[Row] | None = None
    env: Callable[..., Any] | None = None
    """the Environment class or factory each trajectory gets an instance of (`rollout.env` from the kernel)"""
    agent: Any = None
    """an `rf.AgentProgram` that plays the episodes in place of the config's Agent (travels as its
    function and settings; the run brings the engine and tools)"""

    @classmethod
    def of(
        cls,
        reward: Callable[..., Any] | Mapping[str, Callable[..., Any]] | None = None,
        tools: ExtraTools | None = None,
        train_data: Any = None,
        eval_data: Any = None,
        env: Any = None,
        agent: Any = None,
    ) -> RunObjects:
        """Check and normalize what a user passed; every mistake names the argument."""
        if agent is not None and not callable(getattr(agent, "bind", None)):
            raise ArgumentTypeError(f"agent is a {type(agent).__name__}: pass an rf.AgentProgram (or leave it out)")
        if reward is not None:
            named = reward.items() if isinstance(reward, Mapping) else [(own_name(reward), reward)]
            for name, function in named:
                if not callable(function):
                    raise ArgumentTypeError(f"reward {name!r} is a {type(function).__name__}: pass a function of an rf.Sample")
            reward = dict(reward) if isinstance(reward, Mapping) else reward
        return cls(
            reward=reward,
            tools=_extra_tools(tools),
            train_data=None if train_data is None else load_rows(train_data, what="train_data"),
            eval_data=None if eval_data is None else load_rows(eval_data, what="eval_data"),
            env=None if env is None else env_factory(env),
            agent=agent,
        )

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def filled_from(self, kept: RunObjects) -> RunObjects:
        """These objects, with `kept`'s where these have none (`rf.evaluate`: what it is given, else
        what the run folder kept)."""
        mine = {f.name: getattr(self, f.name) for f in fields(self)}
        return dataclasses.replace(kept, **{name: value for name, value in mine.items() if value is not None})

    def functions(self) -> list[tuple[str, Callable[..., Any]]]:
        """(label, function) of every reward and tool function, labels as errors name them."""
        rewards = self.reward.items() if isinstance(self.reward, dict) else [(own_name(self.reward), self.reward)] if self.reward else []
        labelled = [(f"reward {name!r}", function) for name, function in rewards]
        for config in self.tools.functions if self.tools else ():
            function = getattr(config.target, "fn", config.target)
            if callable(function):
                labelled.append((f"tool {getattr(config.target, 'name', function.__name__)!r}", function))
        if self.env is not None:  # travels by value like the functions: its module may be the user's
            labelled.append((f"env {getattr(self.env, '__name__', type(self.env).__name__)!r}", self.env))
        if self.agent is not None:
            labelled.append((f"agent program {getattr(self.agent.fn, '__name__', 'fn')!r}", self.agent.fn))
        return labelled

    def reward_names(self) -> list[str]:
        """The rewards under the user's own names: the dict's keys, or a lone function's name."""
        if isinstance(self.reward, dict):
            return list(self.reward)
        return [] if self.reward is None else [own_name(self.reward)]

    def provenance(self, code_dir: str = CODE_DIR) -> dict[str, Any]:
        """What came from the kernel, as a run records it: per kind, each object's name, module, the
        sha256 of its readable source and the file under `code_dir` that holds that source."""
        record: dict[str, Any] = {}
        rewards = [f for f in self.functions() if f[0].startswith("reward")]
        for kind, labelled, file in (("reward", rewards, "reward.py"), ("tools", self._tool_functions(), "tools.py")):
            entries = []
            for index, (label, function) in enumerate(labelled):
                source = readable_source(function)
                entry = {"name": label.split("'")[1], "module": getattr(function, "__module__", None) or "?",
                         "sha256": hashlib.sha256(source.encode()).hexdigest(), "source": f"{code_dir}/{file}"}
                if kind == "reward":
                    entry["role"] = "trains" if index == 0 else "logged"
                entries.append(entry)
            if entries:
                record[kind] = entries
        for name, value in self._other_code():  # an environment, an agent program: whatever a field holds
            source = readable_source(value)
            record[name] = {"name": own_name(value, name), "module": getattr(value, "__module__", None) or "?",
                            "sha256": hashlib.sha256(source.encode()).hexdigest(), "source": f"{code_dir}/{name}.py"}
        for name in ("train_data", "eval_data"):
            rows = getattr(self, name)
            if rows is not None:
                text = "\n".join(json.dumps(row, default=str, ensure_ascii=False) for row in rows) + "\n"
                record[name] = {"rows": len(rows), "sha256": hashlib.sha256(text.encode()).hexdigest(),
                                "source": f"{code_dir}/{name}.jsonl"}
        return record

    def recorded(self, cfg: RunConfig) -> RunConfig:
        """`cfg` as a run trained with these objects: what the run keeps as its config (checkpoints'
        run_config.yaml). A reward from the kernel is named `objects.pkl:<name>` (its args dropped:
        they belonged to the config's function), rows by the run folder's copy, and `kernel_objects`
        lists everything that came from the kernel (`provenance`); with no objects, only that list
        is emptied (a config copied from an earlier run's record must not keep its list)."""
        changes: dict[str, Any] = {"kernel_objects": self.provenance()}
        if self.reward is not None:
            changes["reward.function"] = f"{PICKLE_FILE}:{self.reward_names()[0]}"
            changes["reward.args"] = {}
        code = str(join(cfg.run_dir, CODE_DIR))
        if self.train_data is not None:
            changes["data.train"] = str(join(code, "train_data.jsonl"))
        if self.eval_data is not None:
            changes["data.eval"] = str(join(code, "eval_data.jsonl"))
        return cfg.replace(changes)

    def _tool_functions(self) -> list[tuple[str, Callable[..., Any]]]:
        return [f for f in self.functions() if f[0].startswith("tool")]

    def _other_code(self) -> list[tuple[str, Any]]:
        """(field, object) of fields beyond reward, tools and rows that hold code (a class or a
        function: an environment, an agent program), so that the record names them too."""
        known = {"reward", "tools", "train_data", "eval_data"}
        return [
            (f.name, value) for f in fields(self)
            if f.name not in known and (value := getattr(self, f.name)) is not None and callable(value)
        ]

    # ------------------------------------------------------------------ travel

    def dumps(self) -> bytes:
        """The objects as bytes (cloudpickle, user modules by value); ObjectTransferError names what
        cannot travel."""
        for _, function in [*self.functions(), *self._other_code()]:  # the source travels with it: another kernel cannot find it
            keep_source(function)
        with pickled_by_value(user_modules(function for _, function in self.functions())):
            parts = [*self.functions(), ("train_data", self.train_data), ("eval_data", self.eval_data)]
            for label, value in parts:
                try:
                    cloudpickle.dumps(value)
                except Exception as error:
                    raise ObjectTransferError(transfer_problem(label, value, error)) from error
            if self.tools is not None:
                for server in self.tools.servers:
                    try:
                        cloudpickle.dumps(server)
                    except Exception as error:
                        raise ObjectTransferError(transfer_problem(f"tool server {server.name!r}", server, error)) from error
            return cloudpickle.dumps(self)

    @staticmethod
    def loads(data: bytes) -> RunObjects:
        return cloudpickle.loads(data)

    # ------------------------------------------------------------------ the run folder

    def save(self, run_dir: str | Path, data: bytes | None = None, config: RunConfig | None = None) -> Path:
        """Write code/objects.pkl (`data`, or `dumps()`), its signature (recording what `config`, a
        RunConfig, names) and the readable copies; returns code/."""
        folder = Path(run_dir) / CODE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        data = data if data is not None else self.dumps()
        (folder / PICKLE_FILE).write_bytes(data)
        write_signature(folder, data, _named_by(config))
        rewards = [(label, fn) for label, fn in self.functions() if label.startswith("reward")]
        header = (
            f"What this run trained with, for reading: this file is never run. Resume, attach and rf.evaluate "
            f"load the pickled objects from {PICKLE_FILE}, in this folder (signed: {SIGNATURE_FILE})."
        )
        programs = [(label, fn) for label, fn in self.functions() if label.startswith("agent program")]
        others = [(f"{name}.py", [(f"{name} {own_name(value, name)!r}", value)]) for name, value in self._other_code()]
        for name, labelled in (("reward.py", rewards), ("tools.py", self._tool_functions()), ("agent.py", programs), *others):
            if labelled:
                (folder / name).write_text(source_listing(labelled, header), encoding="utf-8")
        for name in ("train_data", "eval_data"):
            rows = getattr(self, name)
            if rows is not None:
                lines = (json.dumps(row, default=str, ensure_ascii=False) for row in rows)
                (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return folder

    @classmethod
    def load(cls, run_dir: str | Path, trust_run_objects: bool = False) -> RunObjects | None:
        """The objects a run was started with, or None when it had none; UntrustedRunObjects when
        they lack this user's signature and `trust_run_objects` is off (module docstring)."""
        with local_run_code(run_dir) as local:
            data = cls.saved_bytes(local, trust_run_objects)
        return None if data is None else cls.loads(data)

    @staticmethod
    def saved_bytes(run_dir: str | Path, trust_run_objects: bool = False) -> bytes | None:
        """code/objects.pkl's bytes once its signature checks out (or is waived), else None."""
        folder = Path(run_dir) / CODE_DIR
        path = folder / PICKLE_FILE
        if not path.exists():
            return None
        data = path.read_bytes()
        if not trust_run_objects:
            check_signature(folder, data)
        return data

    @classmethod
    def resumed(
        cls, run_dir: str | Path, config: RunConfig, trust_run_objects: bool = False, say: Callable[[str], None] = print
    ) -> RunObjects:
        """The objects a resume of `config` uses: the folder's, less the reward, tools, environment
        and agent program that `config` names otherwise than it did when they were saved (the config
        wins); `say` gets one line saying which were used."""
        with local_run_code(run_dir) as local:
            kept = cls.load(local, trust_run_objects)
            recorded = read_signature(local / CODE_DIR).get("named_by_config") if kept is not None else None
        if kept is None:
            return cls()
        now = _named_by(config)
        changes, used = {}, []
        for field_name in ("reward", "tools", "env", "agent"):
            if getattr(kept, field_name) is None:
                continue
            names_pickle = field_name == "reward" and config.reward.function.startswith(f"{PICKLE_FILE}:")
            if recorded is not None and recorded.get(field_name) != now.get(field_name) and not names_pickle:
                changes[field_name] = None
                used.append(
                    f"{field_name}: the config's {_shown(now, field_name)}, not the pickled one (the config "
                    f"named {_shown(recorded, field_name)} when it was saved)"
                )
            else:
                used.append(f"{field_name}: the pickled one, {join(run_dir, CODE_DIR, PICKLE_FILE)}")
        if used:
            say("resume: " + "; ".join(used))
        return dataclasses.replace(kept, **changes) if changes else kept


@contextlib.contextmanager
def local_run_code(run_dir: str | Path) -> Iterator[Path]:
    """A local run folder holding the run's code/: `run_dir` itself, or for a run on storage (a URI,
    storage.py) a temporary folder with a copy of its code/."""
    if not is_uri(run_dir):
        yield Path(run_dir)
        return
    store = Storage.at(run_dir)
    with tempfile.TemporaryDirectory(prefix="rlfactory-nb-objects-") as temporary:
        if store.isdir(CODE_DIR):
            store.get_folder(CODE_DIR, Path(temporary) / CODE_DIR)
        yield Path(temporary)


def trust_run_folder(run_dir: str | Path) -> list[Path]:
    """Sign a run folder's code with this user's key: its objects.pkl (the recorded config names are
    kept) and the run config of each checkpoint, so that every later resume, stepper and evaluation
    uses them: the step to take after reading its code/reward.py, code/tools.py and what the configs
    name. Returns the signature files written."""
    from rlfactory_nb.models.checkpoint import RUN_CONFIG, list_checkpoints  # torch: only when signing

    folder = Path(run_dir) / CODE_DIR
    written = []
    if (folder / PICKLE_FILE).exists():
        recorded = read_signature(folder).get("named_by_config")
        written.append(write_signature(folder, (folder / PICKLE_FILE).read_bytes(), recorded))
    for checkpoint in list_checkpoints(run_dir):
        config = checkpoint.path / RUN_CONFIG
        if config.is_file():
            written.append(checkpoint.path / CONFIG_SIGNATURE_FILE)
            written[-1].write_text(config_signature(config.read_text(encoding="utf-8")), encoding="utf-8")
    return written


def _extra_tools(tools: ExtraTools | None) -> ToolsFile | None:
    """`tools.extra.extra_tools`, imported when tools are given: a reader of run folders
    (train/run_folder.py takes `CODE_DIR` from here) never imports the ToolSet and the MCP client."""
    from rlfactory_nb.tools.extra import extra_tools  # keeps the MCP client out of run-folder readers

    return extra_tools(tools)


def _named_by(config: RunConfig | None) -> dict[str, Any] | None:
    """What a RunConfig names for the reward, tools, environment (`rollout.env`) and agent program
    (`rollout.program`), as the signature records it. Files by name only: the driver of a Ray job
    reads the same file under another folder (cluster/shipping.py)."""
    if config is None:
        return None
    tools, program = config.tools.config, config.rollout.program
    return {
        "reward": [Path(config.reward.function).name, config.reward.args],
        "tools": None if tools is None else Path(tools).name,
        "env": config.rollout.env,
        "agent": None if program is None else Path(program).name,
    }


def _shown(named: dict[str, Any], field_name: str) -> str:
    value = named.get(field_name)
    return repr(value[0] if field_name == "reward" and isinstance(value, list) else value)
