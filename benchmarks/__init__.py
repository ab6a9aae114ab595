"""Benchmarks of redis-presence (issue 6): ``python -m benchmarks [--quick] [--out DIR]``.

One run starts its own ``redis-server`` on a free loopback port, measures every case side
by side (see `benchmarks.cases`), prints the tables, and writes ``results.json`` and, when
matplotlib is importable, ``snapshot_scaling.png``.
"""
