"""NL2SQL: answer questions about a database with one SQL query, rewarded by running it.

- `database`: a small shop (customers, products, orders) generated from a seed into the cache;
- `query`: one untrusted SELECT, read-only and bounded in time, rows and memory;
- `server`: the `sql` tool as an MCP server over stdio;
- `data`: questions with gold SQL and results, from templates, with a held-out split;
- `reward`: execution match of the final query, through `tool_verified`.

Nothing is imported here: the tool server (`python -m rlfactory_nb.recipes.nl2sql.server`) must
start without loading the reward's imports. The runnable example is `examples/nl2sql/` (config and
tools file; no data files: all is generated).
"""
