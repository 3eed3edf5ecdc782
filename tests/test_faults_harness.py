"""The fault campaign's own sizing (bench/faults_scenarios.py): disk-warm mounts a tmpfs that must hold a
copy of a pipeline root, then leave the warm run too little room. A root holds hundreds of small files
(the MLflow model's code among them), each taking whole pages on a tmpfs: sized by the sum of file sizes,
the copy itself hit ENOSPC, and the harness's traceback ended the campaign before its last four scenarios."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench" / "faults_scenarios.py"


def _scenarios() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ml8s_faults_scenarios", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tree_of_small_files_is_sized_by_whole_pages(tmp_path: Path) -> None:
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    for n in range(300):
        (tmp_path / "code" / f"d{n % 7}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "code" / f"d{n % 7}" / f"m{n}.py").write_text("x = 1\n")
    (tmp_path / "big.bin").write_bytes(b"\0" * (3 * 1024 * 1024 + 1))
    sized = _scenarios().tmpfs_kib(tmp_path)
    assert sized == 300 * page_kib + 3 * 1024 + page_kib  # the sum of sizes would say about 3 MiB + 2 KiB
