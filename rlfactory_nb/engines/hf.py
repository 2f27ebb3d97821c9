"""The transformers rollout engine: concurrent requests gathered into batches, run in a worker thread.

Agent trajectories call `generate` one at a time from their own tasks. One background task takes
them off a queue and serves all that are waiting as one batch, so 64 trajectories waiting at once
share forward passes; requests arriving while a batch runs join the next one. The model runs in the
engine's own worker thread so the event loop stays free for tool calls meanwhile. The thread is the
engine's, not asyncio's shared pool, because torch's intra-op thread count is per thread: on a busy
2-core machine a 0.25M-parameter model ran a batch 25-50x faster with 1 intra-op thread than with 2
(OpenMP threads spin against each other and against other processes), so `num_threads` sets it
there without touching the caller's threads.

The sampling loop is our own rather than `model.generate`: it returns the exact logprob of each
sampled token (matching a teacher-forced forward pass, which `generate(output_scores=...)` did not
to better than 2e-3), stops each row on its own stop tokens and budget, and takes per-row sampling
settings. Prompts are left-padded so every row's next token sits in the last column. A row that
finishes leaves the batch (with its KV cache rows), so the rest decode without computing it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlfactory_nb.engines.base import (
    EngineTraits,
    Generation,
    SamplingParams,
    check_request,
    check_score_request,
    register_engine,
    stop_token_ids_from_tokenizer,
)
from rlfactory_nb.engines.logprobs import sequence_logprobs
from rlfactory_nb.engines.sampling import sample_tokens, token_logprobs
from rlfactory_nb.errors import (
    ArgumentTypeError,
    ConfigError,
    EngineRequestError,
    EngineStateError,
    RegistryKeyError,
)

SCORE_CHUNK_TOKENS = 1024
"""tokens per chunk of the output layer when scoring: one (chunk, vocabulary) block at a time"""


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future[Generation]


@dataclass
class _Row:
    """The growing output of one request inside a batch."""

    limit: int
    generator: torch.Generator
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None = None


@dataclass(frozen=True)
class _RowSettings:
    """Per-row sampling settings of a batch, as tensors."""

    temperature: torch.Tensor
    top_p: torch.Tensor
    top_k: torch.Tensor

    @classmethod
    def of(cls, sampling: list[SamplingParams], device: torch.device) -> _RowSettings:
        return cls(
            torch.tensor([s.temperature for s in sampling], device=device),
            torch.tensor([s.top_p for s in sampling], device=device),
            torch.tensor([s.top_k for s in sampling], device=device),
        )

    def select(self, rows: torch.Tensor) -> _RowSettings:
        return _RowSettings(self.temperature[rows], self.top_p[rows], self.top_k[rows])


class HFEngine:
    """Rollout engine over a transformers causal LM, on whatever device the model sits on.

    The engine uses `model` as given: weights changed in place by a trainer holding the same object
    are seen by the next batch. To decouple them, pass a copy and push weights with update_weights.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        max_batch_size: int = 64,
        batch_wait_s: float = 0.005,
        stop_token_ids: tuple[int, ...] | None = None,
        seed: int = 0,
        num_threads: int | None = None,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ConfigError(f"HFEngine max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self._stop_token_ids = tuple(stop_token_ids or stop_token_ids_from_tokenizer(tokenizer))
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self._stop_token_ids[0])
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self.vocab_size = model.get_input_embeddings().num_embeddings
        """prompt ids must be below this: the rows of the input embedding"""
        self._seeds = torch.Generator().manual_seed(seed)  # seeds for requests that bring none
        self.batches_run = 0
        """batches served so far (several requests share one when they wait together)"""
        self.requests_served = 0
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="HFEngine",
            initializer=torch.set_num_threads if num_threads else None,
            initargs=(num_threads,) if num_threads else (),
        )
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False
        self._awake_device: torch.device | None = None  # set while asleep
        # A trainer's float32 master shared in-process generates in the run's compute dtype (bf16 on GPU).
        self.compute_dtype = compute_dtype

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self._stop_token_ids

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if self._closed:
            raise EngineStateError("HFEngine is closed")
        self._check_prompt(prompt_ids, sampling)
        queue = self._ensure_worker()
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        await queue.put(_Request(list(prompt_ids), sampling, future))
        return await future

    async def score(self, token_ids: list[int]) -> list[float]:
        """Log-probs of given ids (engines/base.py), by one forward between batches through the
        trainer's chunked head (`rlfactory_nb.engines.logprobs`)."""
        if self._closed:
            raise EngineStateError("HFEngine is closed")
        check_score_request(token_ids, self.vocab_size, self.max_positions)
        self._ensure_worker()
        assert self._lock is not None
        async with self._lock:
            return await self._in_worker(self._in_compute_dtype, self._score, list(token_ids))

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int | None = None) -> None:
        """Copy `state_dict` into the live model between batches (a partial dict updates a subset)."""
        self._ensure_worker()
        assert self._lock is not None
        async with self._lock:
            await self._in_worker(self._copy_weights, state_dict)

    async def sleep(self) -> None:
        """Move the weights to host memory (frees the GPU for a colocated update); `wake_up` undoes it."""
        if self._awake_device is None:
            self._awake_device = self.device
            await self._move(torch.device("cpu"))

    async def wake_up(self) -> None:
        if self._awake_device is not None:
            await self._move(self._awake_device)
            self._awake_device = None

    async def _move(self, device: torch.device) -> None:
        self._ensure_worker()
        assert self._lock is not None
        async with self._lock:  # never in the middle of a batch
            await self._in_worker(self.model.to, device)

    async def close(self) -> None:
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        while self._queue is not None and not self._queue.empty():
            request = self._queue.get_nowait()
            if not request.future.done():
                request.future.set_exception(RuntimeError("HFEngine closed before serving this request"))
        self._worker = self._queue = None
        self._executor.shutdown(wait=False)

    async def _in_worker(self, function: Any, *arguments: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *arguments)

    def _check_prompt(self, prompt_ids: list[int], sampling: SamplingParams) -> None:
        """Fail this request alone, before it joins a batch it would fail with it."""
        check_request(prompt_ids, sampling, self.vocab_size)
        needed = len(prompt_ids) + sampling.max_new_tokens
        if self.max_positions is not None and needed > self.max_positions:
            raise EngineRequestError(
                f"prompt of {len(prompt_ids)} tokens + max_new_tokens {sampling.max_new_tokens} exceeds "
                f"the model's max_position_embeddings {self.max_positions}: lower max_new_tokens"
            )

    def _ensure_worker(self) -> asyncio.Queue[_Request]:
        """Start the batching task on the running loop (again, if a notebook cell changed loops)."""
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._loop is not loop:
            self._queue = asyncio.Queue()
            self._lock = asyncio.Lock()
            self._loop = loop
            self._worker = loop.create_task(self._serve(self._queue), name="HFEngine batcher")
        assert self._queue is not None
        return self._queue

    async def _serve(self, queue: asyncio.Queue[_Request]) -> None:
        while True:
            batch = [await queue.get()]
            await asyncio.sleep(self.batch_wait_s)  # let requests issued in the same instant join
            while len(batch) < self.max_batch_size and not queue.empty():
                batch.append(queue.get_nowait())
            batch = [request for request in batch if not request.future.cancelled()]
            if batch:
                await self._serve_batch(batch)

    async def _serve_batch(self, batch: list[_Request]) -> None:
        assert self._lock is not None
        try:
            async with self._lock:
                generations = await self._in_worker(self._in_compute_dtype, self._run_batch, batch)
        except Exception as error:  # noqa: BLE001 - a failed batch fails its requests, not the engine
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(error)
            return
        self.batches_run += 1
        self.requests_served += len(batch)
        for request, generation in zip(batch, generations):
            if not request.future.done():
                request.future.set_result(generation)

    def _copy_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        params = dict(self.model.named_parameters(remove_duplicate=False)) | dict(self.model.named_buffers())
        unknown = sorted(set(state_dict) - set(params))
        if unknown:
            raise RegistryKeyError(f"update_weights got names the model does not have: {unknown[:5]}")
        with torch.no_grad():
            for name, tensor in state_dict.items():
                params[name].copy_(tensor)

    def _in_compute_dtype(self, work: Any, argument: Any) -> Any:
        weights = next(self.model.parameters()).dtype
        if self.compute_dtype is None or self.compute_dtype == weights:
            return work(argument)
        with torch.autocast(device_type=self.device.type, dtype=self.compute_dtype):
            return work(argument)

    @torch.inference_mode()
    def _score(self, token_ids: list[int]) -> list[float]:
        ids = torch.tensor([token_ids], device=self.device)  # (1, L)
        dtype = self.compute_dtype or next(self.model.parameters()).dtype
        return sequence_logprobs(self.model, ids, SCORE_CHUNK_TOKENS, dtype)[0].tolist()

    @torch.inference_mode()
    def _run_batch(self, batch: list[_Request]) -> list[Generation]:
        device = self.device
        input_ids, attention_mask = self._left_pad([request.prompt_ids for request in batch], device)
        rows = [self._new_row(request.sampling) for request in batch]
        settings = _RowSettings.of([request.sampling for request in batch], device)
        stop_ids = torch.tensor(self._stop_token_ids, device=device)
        position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)  # (B, L)
        output = self.model(  # the prefill: only the last position's logits are sampled from
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
        )
        live = rows  # the rows still generating, in batch order
        for _ in range(max(row.limit for row in rows)):
            logits = output.logits[:, -1, :]  # (b, V)
            uniforms = torch.stack([torch.rand((), generator=row.generator) for row in live]).to(device)
            tokens = sample_tokens(logits, settings.temperature, settings.top_p, settings.top_k, uniforms)
            logprobs = token_logprobs(logits, tokens)  # (b,)
            stopped = torch.isin(tokens, stop_ids)
            for row, token, logprob, stop in zip(live, tokens.tolist(), logprobs.tolist(), stopped.tolist()):
                self._append(row, token, logprob, stop)
            going = [index for index, row in enumerate(live) if row.finish_reason is None]
            if not going:
                break
            cache = output.past_key_values
            if len(going) < len(live) and hasattr(cache, "batch_select_indices"):
                # Drop finished rows (and their KV cache) so later steps compute only live ones.
                keep = torch.tensor(going, device=device)
                cache.batch_select_indices(keep)
                tokens, attention_mask, position_ids = tokens[keep], attention_mask[keep], position_ids[keep]
                settings = settings.select(keep)
                live = [live[index] for index in going]
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(live), 1)], dim=1)
            position_ids = position_ids[:, -1:] + 1
            output = self.model(
                input_ids=tokens[:, None],
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
            )
        return [Generation(row.token_ids, row.logprobs, row.finish_reason or "length") for row in rows]

    def _new_row(self, sampling: SamplingParams) -> _Row:
        seed = sampling.seed
        if seed is None:
            seed = int(torch.randint(0, 2**62, (), generator=self._seeds))
        return _Row(sampling.max_new_tokens, torch.Generator().manual_seed(seed), [], [])

    @staticmethod
    def _append(row: _Row, token: int, logprob: float, stop: bool) -> None:
        """Record a row's sampled token unless the row already finished (it then only pads the batch)."""
        if row.finish_reason is not None:
            return
        row.token_ids.append(token)
        row.logprobs.append(logprob)
        if stop:
            row.finish_reason = "stop"
        elif len(row.token_ids) >= row.limit:
            row.finish_reason = "length"

    def _left_pad(self, prompts: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L) ids and attention mask with each prompt right-aligned."""
        width = max(len(prompt) for prompt in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[i, width - len(prompt) :] = 1
        return ids.to(device), mask.to(device)


QUIET_LOAD_BYTES = 256 * 2**20
"""a local model folder with fewer weight bytes loads without transformers' "Loading weights" bar:
it takes well under a second, and its bar repeated in every cell and log (presets, tests, checkpoints)"""


@contextlib.contextmanager
def quiet_if_small(path: str | Path) -> Iterator[None]:
    """transformers' progress bars off while a small local folder loads (QUIET_LOAD_BYTES)."""
    from transformers.utils import (
        logging as transformers_logging,  # deferred: transformers loads with a model
    )

    folder = Path(path)
    weights = sum(f.stat().st_size for f in folder.glob("*.safetensors")) if folder.is_dir() else QUIET_LOAD_BYTES
    if weights >= QUIET_LOAD_BYTES or not transformers_logging.is_progress_bar_enabled():
        yield
        return
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()



@register_engine("hf", EngineTraits(loads="objects"))
def _create_hf_engine(model_path_or_objects: Any, **options: Any) -> HFEngine:
    """`create_engine("hf", path_or_(model, tokenizer), device=..., dtype=..., **HFEngine options)`."""
    if isinstance(model_path_or_objects, (str, Path)):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = options.pop("device", "cuda" if torch.cuda.is_available() else "cpu")
        dtype = options.pop("dtype", torch.float32)
        with quiet_if_small(model_path_or_objects):
            model = AutoModelForCausalLM.from_pretrained(str(model_path_or_objects), dtype=dtype, trust_remote_code=False).to(device)
            tokenizer = AutoTokenizer.from_pretrained(str(model_path_or_objects), trust_remote_code=False)
        return HFEngine(model, tokenizer, **options)
    if isinstance(model_path_or_objects, tuple) and len(model_path_or_objects) == 2:
        model, tokenizer = model_path_or_objects
        return HFEngine(model, tokenizer, **options)
    raise ArgumentTypeError(
        "create_engine('hf', ...) takes a model folder (str or Path) or a (model, tokenizer) pair, "
        f"got {type(model_path_or_objects).__name__}"
    )
