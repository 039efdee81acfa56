"""Unit tests never reach a real Hugging Face Hub nor write dsv4ctl's cache in the home directory: the hub is
switched off (HF_HUB_OFFLINE=1) and dsv4ctl's cache is a fresh temporary directory, unless a test sets up its
own hub on 127.0.0.1 (tests/hubkit.py, tests/unit/test_fit_hub.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_hub(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DSV4CTL_CACHE_DIR", str(tmp_path_factory.mktemp("dsv4ctl-cache")))
