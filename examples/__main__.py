"""Run every example dataflow and print its results: ``python -m examples``."""

from examples import bfs, windowed_count, wordcount

for mod in (wordcount, windowed_count, bfs):
    mod.main()
    print()
