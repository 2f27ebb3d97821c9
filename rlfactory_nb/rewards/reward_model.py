"""`reward_model`: a trained reward model (a Hugging Face sequence classifier) as a reward function.

    rm = rf.rewards.reward_model("path/or/hub-id", device="cuda", batch_size=32)
    await rm(sample)                                             # a float, like any reward function
    lab = rf.RewardLab(agent, rows, rewards={"rm": rm, "em": rf.rewards.exact_match})

    reward:                                                      # in a run config
      function: rlfactory_nb.rewards:reward_model
      args: {path: ./my-reward-model, batch_size: 16}

The model reads the whole sampled conversation (prompt, assistant turns, tool responses) rendered by
its own tokenizer's chat template (or `chat_template=`), as TRL's and verl's reward models do. Long
conversations are cut from the left to `max_length` tokens, so the model always sees the end of the
answer. The score is the classifier's single logit; a classifier with several labels gives the
probability of `label` (an index or a name from its `id2label`).

Calls are batched: the runner scores a step's samples concurrently, each call joins a queue, and the
queue runs as one forward of up to `batch_size` conversations as soon as the event loop has started
every call it can (or the queue is full). Forwards run off the event loop, one at a time.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from pathlib import Path

from rlfactory_nb.errors import RewardModelError
from rlfactory_nb.rollout import template_bounds
from rlfactory_nb.types import Message, Sample


class RewardModel:
    """An async reward function over the sequence classifier at `path` (a local Hugging Face folder or
    a hub id), on `device` ("auto": cuda when available); see the module docstring. `score` is its
    plain batch form."""

    def __init__(
        self,
        path: str | Path,
        *,
        device: str = "auto",
        batch_size: int = 16,
        max_length: int = 2048,
        label: int | str | None = None,
        chat_template: str | None = None,
        dtype: str = "float32",
    ):
        import torch  # here, not at import: `import rlfactory_nb.rewards` stays free of torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if batch_size < 1 or max_length < 1:
            raise RewardModelError(f"need batch_size and max_length >= 1, got {batch_size} and {max_length}")
        self.path = str(path)
        check_sequence_classifier(self.path)
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        )
        self.batch_size, self.max_length = batch_size, max_length
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, truncation_side="left", trust_remote_code=False)
        template_bounds.install()  # the folder's chat template renders in the bounded sandbox
        self.chat_template = chat_template or self.tokenizer.chat_template
        if not self.chat_template:
            raise RewardModelError(
                f"reward model {self.path}: its tokenizer has no chat template to render conversations "
                "with; pass chat_template= (a Jinja template string)"
            )
        self.model = AutoModelForSequenceClassification.from_pretrained(
            self.path, dtype=getattr(torch, dtype), trust_remote_code=False
        )
        self.model.to(self.device).eval()
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:  # decoder classifiers find each row's last token by it
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.label = self._label_index(label)
        self.__name__ = "reward_model"  # the runner names functions by __name__
        self.forwards = 0
        """batches scored so far"""
        self._queue: list[tuple[Sample, asyncio.Future[float]]] = []
        self._running: set[asyncio.Task[None]] = set()
        self._forward = threading.Lock()  # one forward at a time, whichever thread or event loop asks

    def _label_index(self, label: int | str | None) -> int | None:
        labels = self.model.config.id2label or {}
        count = self.model.config.num_labels
        if label is None:
            if count == 1:
                return None
            raise RewardModelError(
                f"reward model {self.path} has {count} labels ({', '.join(map(str, labels.values()))}): "
                "pass label= (an index or a name) to score by that label's probability"
            )
        if isinstance(label, str):
            names = {name: index for index, name in labels.items()}
            if label not in names:
                raise RewardModelError(
                    f"reward model {self.path} has no label {label!r}; its labels: {names}"
                )
            return int(names[label])
        if not 0 <= label < count:
            raise RewardModelError(
                f"reward model {self.path} has {count} labels; label={label} is out of range"
            )
        return label

    def conversation(self, sample: Sample) -> list[Message]:
        """What the model reads: the trajectory's messages, or prompt + response for a hand-made sample."""
        if sample.trajectory is not None and sample.trajectory.messages:
            return list(sample.trajectory.messages)
        return [*sample.prompt, {"role": "assistant", "content": sample.response}]

    def score(self, samples: Sequence[Sample]) -> list[float]:
        """One score per sample, in `batch_size` forwards (blocking; `await rm(sample)` batches for you)."""
        import torch

        scores: list[float] = []
        for start in range(0, len(samples), self.batch_size):
            texts = [
                self.tokenizer.apply_chat_template(
                    self.conversation(sample), chat_template=self.chat_template, tokenize=False
                )
                for sample in samples[start : start + self.batch_size]
            ]
            inputs = self.tokenizer(
                texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            ).to(self.device)
            with self._forward, torch.no_grad():
                logits = self.model(**inputs).logits.float()  # (B, labels)
                self.forwards += 1
            if self.label is None:
                scores += logits[:, 0].tolist()
            else:
                scores += torch.softmax(logits, dim=-1)[:, self.label].tolist()
        return scores

    async def __call__(self, sample: Sample) -> float:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[float] = loop.create_future()
        self._queue.append((sample, future))
        if len(self._queue) >= self.batch_size:
            self._flush()
        elif len(self._queue) == 1:
            loop.call_soon(self._flush)  # after the calls already scheduled have joined the queue
        return await future

    def _flush(self) -> None:
        batch, self._queue = self._queue[: self.batch_size], self._queue[self.batch_size :]
        if batch:
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._running.add(task)  # a task nobody holds can be garbage-collected mid-run
            task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[tuple[Sample, asyncio.Future[float]]]) -> None:
        try:
            scores = await asyncio.to_thread(self.score, [sample for sample, _ in batch])
        except Exception as error:  # noqa: BLE001  (each caller's future reports it)
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), value in zip(batch, scores):
            if not future.done():  # a call the runner timed out is no longer awaited
                future.set_result(value)

    def __repr__(self) -> str:
        return f"reward_model({self.path!r}, device={str(self.device)!r})"


reward_model = RewardModel
"""`rf.rewards.reward_model(path, ...)`: the lowercase name reads like the other reward functions"""


def check_sequence_classifier(path: str) -> None:
    """Fail, naming the folder and what it holds, unless `path` holds a sequence classifier (a local
    folder is read as it is; a hub id through transformers)."""
    folder = Path(path).expanduser()
    if folder.is_dir():
        config_file = folder / "config.json"
        if not config_file.is_file():
            held = ", ".join(sorted(p.name for p in folder.iterdir())[:10]) or "nothing"
            raise RewardModelError(
                f"reward model folder {folder} holds no config.json, so no Hugging Face model (it holds: "
                f"{held}); point path at a folder written by save_pretrained of a *ForSequenceClassification"
            )
        architectures = json.loads(config_file.read_text(encoding="utf-8")).get("architectures") or []
    else:
        from transformers import AutoConfig

        architectures = AutoConfig.from_pretrained(path, trust_remote_code=False).architectures or []
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        held = ", ".join(architectures) or "a model config that names no architecture"
        hint = (
            " (a language model, not a reward model)" if any("CausalLM" in a for a in architectures) else ""
        )
        raise RewardModelError(
            f"{path} holds {held}{hint}, not a sequence classifier: a reward model is a "
            "*ForSequenceClassification (e.g. AutoModelForSequenceClassification.from_pretrained(..., "
            "num_labels=1) trained on preferences, then save_pretrained)"
        )
