"""ToolSetView: the form calls the real ToolSet; bad input comes back as a result, as the model sees it."""

from rlfactory_nb.widgets.tools import ToolSetView


async def test_form_calls_the_tool_and_records_latency(tools):
    view = ToolSetView(tools)
    assert view.tool.value == "add" and view.arguments.value == '{"a": 0, "b": 0}'
    assert "Add two integers." in view.specs.value
    view.arguments.value = '{"a": 40, "b": 2}'
    result = await view.call_from_form()
    assert result.ok and result.content == "42"
    view._show(result)
    assert "42" in view.result.value and "add" in view.latencies.value and "42" in view.static_html()


async def test_invalid_arguments_are_data_not_exceptions(tools):
    view = ToolSetView(tools)
    view.arguments.value = '{"a": "forty"}'
    result = await view.call_from_form()
    assert result.status == "invalid_args"
    view.arguments.value = "{not json"
    assert (await view.call_from_form()).status == "invalid_args"
