"""Where a checkpoint's geometry comes from: `load_geometry(model)` picks the source and asks it.

Sources, in the order `load_geometry` tries them:
- a checkpoint directory (its config.json, plus safetensors headers for the weight size),
- a config.json path,
- a model id already in the local Hugging Face cache (config.json and safetensors headers from there),
- a built-in public model id (`deepseek-ai/DeepSeek-V4-Flash`, `deepseek-ai/DeepSeek-V4-Pro`), whose
  published config values ship in `builtin_models.json` (the KV layout; no weight sizes): when a plan needs
  the weights, the hub's config.json and safetensors headers are read then (`hub.py`), never before,
- any other hub id `org/name`: its config.json from the hub (or dsv4ctl's cache of it), the safetensors
  headers when a plan needs the weights. Tensor data is never downloaded.

A hub checkpoint is the hub's to describe: `hub.py` returns the geometry (or the weights that read its headers
later); `geometry.py` reads a config and headers and knows no hub. The hub is imported only when a model needs
it, so a plan of a local checkpoint never loads it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dsv4ctl.errors import InputError, UsageError
from dsv4ctl.planning.checkpoint.geometry import (
    Dsv4Geometry,
    _builtin_configs,
    _geometry_from_config,
    _read_json,
    builtin_model_ids,
    read_safetensors_weights,
)
from dsv4ctl.planning.checkpoint.hub_cache import find_snapshot, is_repo_id


def load_geometry(model: str | Path) -> Dsv4Geometry:
    """Read the DeepSeek-V4 geometry from a checkpoint dir, a config.json, the local Hugging Face cache, a built-in
    model id, or the hub (a hub id's config.json; its safetensors headers only when a plan asks for the weights).

    Raises InputError (one line + hint) for anything unreadable or not DeepSeek-V4.
    """
    text = str(model)
    if not text.strip():
        raise UsageError("MODEL is empty", hint="a model id (deepseek-ai/DeepSeek-V4-Flash), a checkpoint directory or its config.json")
    path = Path(text).expanduser()
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise InputError(
                f"{text}: no config.json in this directory",
                hint="point at a DeepSeek-V4 checkpoint directory or its config.json",
            )
        config = _read_json(config_path)
        geometry = _geometry_from_config(config, model=text, source="config", config_path=str(config_path), weights=None, directory=path)
        weights = read_safetensors_weights(path, geometry.num_hidden_layers)
        return replace(geometry, weights=weights)
    if path.is_file():
        config = _read_json(path)
        return _geometry_from_config(config, model=text, source="config", config_path=str(path), weights=None, directory=path.parent)
    cached = find_snapshot(text)  # never downloads; huggingface_hub's cache API when installed (hub_cache.py)
    if cached is not None:
        config = _read_json(cached / "config.json")
        geometry = _geometry_from_config(
            config, model=text, source="hf-cache", config_path=str(cached / "config.json"), weights=None, directory=cached
        )
        weights = read_safetensors_weights(cached, geometry.num_hidden_layers)
        if weights is None:  # a partial snapshot (config only): the same revision's headers from the hub, if asked
            from dsv4ctl.planning.checkpoint.hub import HubWeights

            weights = HubWeights(text, cached.name, commit=cached.name)
        return replace(geometry, weights=weights, revision=cached.name)
    builtins = _builtin_configs()
    for model_id in builtin_model_ids():
        if text == model_id or text.lower() == model_id.lower():
            from dsv4ctl.planning.checkpoint.hub import REVISION, HubWeights

            geometry = _geometry_from_config(builtins[model_id], model=model_id, source="builtin", config_path=None, weights=None, directory=None)
            revision = builtins.get("_presets", {}).get(model_id, {}).get("revision")
            # The preset is the KV layout; the weights only a checkpoint has: the hub's headers, read if a plan asks.
            return replace(geometry, revision=revision, weights=HubWeights(model_id, REVISION, preset=geometry))
    if path.suffix == ".json" or text.startswith((".", "/", "~")) or not is_repo_id(text):
        # A preset's own name without its organisation (the hub's ids are org/name): that preset, named whole.
        named = [m for m in builtin_model_ids() if m.rsplit("/", 1)[-1].lower() == text.lower()]
        hint = (f"not a file or directory here; the built-in preset of that name is {named[0]}" if named
                else "check the path, or give a hub id (org/name)")
        raise InputError(f"{text}: no such file or directory", hint=hint)
    from dsv4ctl.planning.checkpoint.hub import geometry_from_hub

    return geometry_from_hub(text)

