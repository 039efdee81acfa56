"""The stale-max-model-len wrapper's propagation rules, on plain objects (no vLLM needed): it writes
plain instance attributes only, never a property, lowers the draft length, and never raises."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from dsv4ctl.fixes.stale_max_model_len import MARKER, NAME, _make_wrapper, _propagates, propagate


def original_update(self, max_model_len):  # the body vLLM 0.27-0.33 ship
    self.max_model_len = max_model_len
    self.req_states.max_model_len = max_model_len


class PropertyState:  # vLLM >= 0.31
    def __init__(self, config):
        self.model_config = config

    @property
    def max_model_len(self):
        return self.model_config.max_model_len


class SlotsState:
    __slots__ = ("max_model_len",)


def _runner(model_state, speculator=None):
    return SimpleNamespace(max_model_len=1048576, req_states=SimpleNamespace(max_model_len=1048576),
                           model_state=model_state, speculator=speculator)


def test_wrapper_updates_plain_attributes_and_lowers_draft_length():
    wrapped = _make_wrapper(original_update)
    assert getattr(wrapped, MARKER) == NAME and wrapped.__wrapped__ is original_update
    spec = SimpleNamespace(max_model_len=1048576, draft_max_seq_len=4096)
    runner = _runner(SimpleNamespace(max_model_len=1048576), spec)
    wrapped(runner, 980224)
    assert runner.model_state.max_model_len == 980224 and spec.max_model_len == 980224
    assert spec.draft_max_seq_len == 4096  # already below the fitted length: unchanged
    spec.draft_max_seq_len = 1048576
    wrapped(runner, 980224)
    assert spec.draft_max_seq_len == 980224


def test_property_and_slots_are_left_alone():
    config = SimpleNamespace(max_model_len=980224)
    state = PropertyState(config)
    assert propagate(_runner(state), 980224) == []
    assert "max_model_len" not in vars(state) and state.max_model_len == 980224
    slots = SlotsState()
    slots.max_model_len = 1048576
    assert propagate(_runner(slots), 980224) == []


def test_propagation_failure_is_logged_not_raised(caplog):
    class Exploding:
        def __init__(self):
            self.__dict__["max_model_len"] = 1048576

        def __setattr__(self, name, value):
            raise RuntimeError("read-only today")

    runner = _runner(Exploding())
    logger = logging.getLogger("vllm.plugins.dsv4ctl")
    logger.addHandler(caplog.handler)  # directly: vLLM's logging config may stop propagation to root
    try:
        with caplog.at_level(logging.WARNING, logger="vllm.plugins.dsv4ctl"):
            _make_wrapper(original_update)(runner, 980224)
    finally:
        logger.removeHandler(caplog.handler)
    assert runner.max_model_len == 980224  # the original still ran
    assert "could not propagate" in caplog.text and "read-only today" in caplog.text


def test_propagation_dry_run():
    assert _propagates(original_update) is False

    def fixed_update(self, max_model_len):
        original_update(self, max_model_len)
        self.model_state.max_model_len = max_model_len

    assert _propagates(fixed_update) is True
