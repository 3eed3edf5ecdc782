"""Lines the chain views print from what a store holds (a root's path, a version's drift lines) reach a terminal
escaped: an escape sequence or a bidirectional mark in them cannot clear the screen or reorder a line."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from ml8s.cli import chain_views, reproduce
from ml8s.errors import Ml8sError

ODD = "file:///data/a\x1b[2Jb\u202ec\u2028d"


class _Store:
    def uri(self, key: str) -> str:
        return f"{ODD}/{key}"


class _Chain:
    name = "m"
    store = _Store()

    def list(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(counter=0), SimpleNamespace(counter=1, header=SimpleNamespace(tensorboard_logdir="tb"))]

    def key(self, name: str) -> str:
        return f"ml8s_chain/m/{name}"


def test_tensorboard_listing_prints_an_odd_root_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(counters=[], serve=False, json=False)
    assert chain_views.tensorboard(args, _Chain()) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert out == "v0000000001:file:///data/a\\x1b[2Jb\\u202ec\\u2028d/ml8s_chain/m/tb\n"
    assert not any(ch in out for ch in "\x1b\u202e\u2028")


def test_reproduce_names_an_odd_root_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "r\x1b[2J\u202e"
    root.mkdir()
    with pytest.raises(Ml8sError):  # no chain there: what matters is the line printed before
        reproduce.reproduce(f"file://{root}", "m", 0, as_json=False)
    err = capsys.readouterr().err
    assert "r\\x1b[2J\\u202e" in err and not any(ch in err for ch in "\x1b\u202e")
