"""Before and after a change, in one run: the same benchmarks on an earlier commit and on
this checkout, run alternately so that machine noise hits both alike.

    python -m benchmarks.before_after --before REF [--repeat R] [--bench "MODULE ARGS"]...

``REF`` is any git revision (a commit, ``main``, a tag); its tree is exported with
``git archive`` into a temporary directory (nothing in this checkout changes).  Each
``--bench`` is a benchmark module of this directory with its arguments, e.g.
``"benchmarks.keyed_count --repeat 1"``; it must end its output with one JSON object
of figures (every benchmark here does).  The default set is what issue 27 names:
``benchmarks.keyed_count``, ``benchmarks.stateless_pipeline`` and the embedded CEP
benchmark on the 3M flights (``benchmarks.cep``, when the data set is present).

Both sides are measured by the same harness: this checkout's ``benchmarks/`` directory
replaces the earlier tree's (``--own-benchmarks`` keeps the earlier commit's), so a
figure only differs by the library code under test.

Every round runs each benchmark once on each side, the side that goes first alternating
between rounds; the table shows each figure's median per side and ``after / before``.
The last line is one JSON object ``{"<module>.<figure>": after / before}`` (for speed
figures, above 1 is faster after the change).  A benchmark absent on the earlier
commit, or whose figure is missing on one side, is reported and skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from benchmarks.common import ratio, table

HERE = Path(__file__).resolve().parents[1]
FLIGHTS = HERE.parent / "shared" / "data" / "flights-3m.parquet"


def default_benches() -> list[str]:
    benches = ["benchmarks.keyed_count --repeat 1", "benchmarks.stateless_pipeline --repeat 1"]
    if FLIGHTS.exists():
        benches.append(f"benchmarks.cep --repeat 1 --path {FLIGHTS}")
    return benches


def export(ref: str, into: Path, same_benchmarks: bool) -> Path:
    """The tree of ``ref`` unpacked under ``into`` (``git archive``), with this checkout's
    ``benchmarks/`` in place of its own when ``same_benchmarks``."""
    archive = subprocess.run(
        ["git", "-C", str(HERE), "archive", "--format=tar", ref], check=True, capture_output=True
    ).stdout
    tar_path = into / "before.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into / "tree", filter="data")
    if same_benchmarks:
        shutil.rmtree(into / "tree" / "benchmarks", ignore_errors=True)
        shutil.copytree(HERE / "benchmarks", into / "tree" / "benchmarks", ignore=shutil.ignore_patterns("results"))
    return into / "tree"


def run_once(root: Path, bench: str) -> dict[str, float] | None:
    """Run ``python -m <bench>`` in ``root``; its last line's JSON figures, or None."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run(
        [sys.executable, "-m", *shlex.split(bench)], cwd=root, env=env, capture_output=True, text=True
    )
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(f"{bench} failed in {root} (exit {proc.returncode}):\n{proc.stderr[-2000:]}\n")
        return None
    try:
        figures = json.loads(lines[-1])
    except json.JSONDecodeError:
        sys.stderr.write(f"{bench} in {root} did not end with a JSON line\n")
        return None
    return {k: float(v) for k, v in figures.items() if isinstance(v, (int, float))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision to compare against")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (each runs every benchmark on both sides)")
    ap.add_argument("--own-benchmarks", action="store_true", help="run the earlier commit's own benchmarks/")
    ap.add_argument("--bench", action="append", default=None, help='"MODULE ARGS", repeatable')
    args = ap.parse_args(argv)
    benches = args.bench or default_benches()
    seen: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="tstate-before-") as tmp:
        sides = {"before": export(args.before, Path(tmp), not args.own_benchmarks), "after": HERE}
        for round_ in range(args.repeat):
            order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
            for bench in benches:
                for side in order:
                    figures = run_once(sides[side], bench)
                    for key, value in (figures or {}).items():
                        seen.setdefault((bench.split()[0], key, side), []).append(value)
    rows = []
    ratios: dict[str, float] = {}
    for module, key in sorted({(m, k) for m, k, _ in seen}):
        before = seen.get((module, key, "before"))
        after = seen.get((module, key, "after"))
        if not before or not after:
            print(f"{module} {key}: missing on one side, skipped", file=sys.stderr)
            continue
        b, a = statistics.median(before), statistics.median(after)
        r = a / b if b else float("nan")
        ratios[f"{module}.{key}"] = ratio(r)
        rows.append((module, key, b, a, f"{r:.3f}"))
    print(f"before = {args.before}, after = this checkout; medians of {args.repeat} alternating rounds")
    print(table(["benchmark", "figure", "before", "after", "after / before"], rows))
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
