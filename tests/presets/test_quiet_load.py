"""A preset (or any small local folder) loads without transformers' "Loading weights" bar, which
repeated in every notebook cell and log; the bar setting is left as it was."""

from transformers.utils import logging as transformers_logging

from rlfactory_nb.models.policy import Policy


def test_a_preset_loads_without_a_weight_loading_bar(capfd):
    Policy.load("tiny-calculator", log=lambda _: None)
    captured = capfd.readouterr()
    assert "Loading weights" not in captured.err + captured.out
    assert transformers_logging.is_progress_bar_enabled()
