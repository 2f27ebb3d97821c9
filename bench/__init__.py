"""The benchmarks behind BENCHMARKS.md: `python -m bench` (what `make bench` runs) runs them all.

Each `bench/<name>.py` is also a plain script (`python bench/<name>.py [--quick]`) that writes its
figures to `bench/results/<name>.json` and its section of BENCHMARKS.md to `bench/results/<name>.md`.
"""
