"""The fuzz targets in the default run: every input of the kept corpus replayed in-process, then
a short coverage-guided run of each target (`FUZZ_RUNS` inputs, 20,000 unless set; the long run
is `python -m tests.fuzz.run TARGET -runs=1000000 ...`, see run.py). A crash, a hang past 10 s
or memory past 1 GiB fails the test with libFuzzer's report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS

CORPUS = Path(__file__).parent / "corpus"
ROOT = Path(__file__).parents[2]
RUNS = int(os.environ.get("FUZZ_RUNS", "20000"))


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_kept_corpus_passes(target: str) -> None:
    inputs = sorted((CORPUS / target).iterdir())
    assert inputs, f"no corpus for {target}: run python -m tests.fuzz.seeds"
    for path in inputs:
        TARGETS[target](path.read_bytes())


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_coverage_guided_run_finds_no_crash_hang_or_leak(target: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS / target, corpus)
    run = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.run", target, f"-runs={RUNS}", "-rss_limit_mb=1024", "-timeout=10",
         "-seed=1" if os.environ.get("CI") == "true" else "-seed=0", f"-artifact_prefix={tmp_path}/", str(corpus)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert f"Done {RUNS} runs" in run.stderr, run.stderr[-2000:]
