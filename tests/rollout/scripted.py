"""A scripted engine for unit tests of the agent loop's logic (real engines are tested elsewhere)."""

import asyncio

from rlfactory_nb.engines.base import Generation


class ScriptedEngine:
    """Replies with fixed assistant texts in order (per trajectory, keyed by the user prompt)."""

    def __init__(self, tokenizer, replies: dict[str, list[str]], delay_s: float = 0.0):
        self.tokenizer, self.replies, self.delay_s = tokenizer, replies, delay_s
        self.turn = {}
        self.stop_token_ids = (tokenizer.eos_token_id,)

    async def generate(self, prompt_ids, sampling):
        await asyncio.sleep(self.delay_s)
        prompt = self.tokenizer.decode(prompt_ids)
        key = next(k for k in self.replies if k in prompt)
        index = sum(1 for _ in range(prompt.count("<|im_start|>assistant")) ) - 1
        text = self.replies[key][min(index, len(self.replies[key]) - 1)]
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) >= sampling.max_new_tokens:
            ids = ids[: sampling.max_new_tokens]
            return Generation(ids, [-0.5] * len(ids), "length")
        ids = ids + [self.tokenizer.eos_token_id]
        return Generation(ids, [-0.5] * len(ids), "stop")

    async def update_weights(self, state_dict, version=None):
        pass

    async def close(self):
        pass
