"""Testing helpers for users of medretrieve: the pytest plugin (:mod:`.plugin`: tiny-collection fixtures, latency
gates on pytest-benchmark), latency budgets (:mod:`.latency`), a tiny collection (:mod:`.collection`) and a real
server process (:mod:`.server`). Imports nothing heavy: pytest loads the plugin for every test run."""
