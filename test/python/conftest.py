"""Fixtures shared by test_load.py and test_harvest.py."""

from __future__ import annotations

from typing import Any, List

import pytest


@pytest.fixture
def probe_calls(monkeypatch: Any) -> List[bytes]:
    """The toolchain probes this process runs in its own interpreter
    (kbundle._lib._run_probe), each as the keys it was asked for, from
    now to the end of the test."""
    from kbundle import _lib

    calls: List[bytes] = []
    run = _lib._run_probe

    def counted(script: bytes, want: bytes) -> bytes:
        calls.append(want)
        return run(script, want)

    monkeypatch.setattr(_lib, "_run_probe", counted)
    return calls
