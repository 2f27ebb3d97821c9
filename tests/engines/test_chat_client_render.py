"""A judge or model tool on a family that ships a Python encoder instead of a chat template (DeepSeek
V3.2/V4, Kimi K3): its prompts render through the family's own renderer, as the rollouts' do."""

import pytest

from rlfactory_nb.chat import get_chat_format
from rlfactory_nb.chat.render import render_prompt
from rlfactory_nb.engines.chat_client import chat_client
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from tests.chat.test_deepseek_dsml import tokenizer_of

MESSAGES = [{"role": "system", "content": "Grade the answer."}, {"role": "user", "content": "Is 2+2=4? Say yes or no."}]


class Recording(ScriptedEngine):
    """The scripted engine, keeping each prompt's ids."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prompts = []

    async def generate(self, prompt_ids, sampling):
        self.prompts.append(list(prompt_ids))
        return await super().generate(prompt_ids, sampling)


@pytest.mark.parametrize("generation", ["deepseek_v32", "deepseek_v41"])
async def test_an_engine_judge_on_a_self_rendering_family_gets_its_renderers_prompt(generation):
    tokenizer = tokenizer_of(generation)
    assert not tokenizer.chat_template  # as these models ship: the old client refused them here
    engine = Recording(tokenizer, ["yes"])
    client = chat_client(engine=engine)
    reply = await client.complete(MESSAGES)
    assert reply.text == "yes"
    family = "deepseek_v32" if generation == "deepseek_v32" else "deepseek_v4"
    expected = render_prompt(get_chat_format(family), tokenizer, MESSAGES, add_generation_prompt=True)
    assert tokenizer.decode(engine.prompts[0]) == expected


def test_a_tokenizer_with_neither_a_template_nor_a_family_is_still_refused():
    bare = build_tokenizer(template="")
    with pytest.raises(ConfigError, match="tokenizer="):
        chat_client(engine=ScriptedEngine(bare, ["x"]), tokenizer=bare)
