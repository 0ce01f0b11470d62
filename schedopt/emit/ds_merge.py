"""``emit -t deepspeed --merge ds_config.json``: the emitted keys merged into a user's config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from schedopt.errors import SchedoptError
from schedopt.files import load_json

__all__ = ["merge_ds_config", "merged_file"]

#: Keys of the emitted fragment a config may already set only to the same value: they change
#: what is trained (ZeRO stage, micro-batches per step), not only how gradients are grouped.
FIXED_KEYS = (("zero_optimization", "stage"), ("gradient_accumulation_steps",))


def merge_ds_config(config: Any, fragment: dict[str, Any], option: str = "--merge"
                    ) -> tuple[dict[str, Any], list[str]]:
    """Merge the emitted DeepSpeed ``fragment`` into a user's ``config``.

    Parameters
    ----------
    config
        The user's ds_config (a JSON object); every key the fragment does not set is kept.
    fragment
        What ``emit -t deepspeed`` wrote to ``deepspeed.json``.
    option
        How errors name the file's option.

    Returns
    -------
    tuple
        The merged config (``zero_optimization`` merged key by key, the fragment's values
        winning) and one note per value of the config the fragment replaced.

    Raises
    ------
    SchedoptError
        The config is not an object, its ``zero_optimization`` is not an object, or it sets
        ``zero_optimization.stage`` or ``gradient_accumulation_steps`` to another value than
        the plan's.
    """
    if not isinstance(config, dict):
        raise SchedoptError("must hold a JSON object (a ds_config)", option,
                            type(config).__name__)
    zero = config.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise SchedoptError("zero_optimization must be an object", option, zero)
    for path in FIXED_KEYS:
        mine, theirs = _get(fragment, path), _get(config, path)
        if mine is not None and theirs is not None and theirs != mine:
            raise SchedoptError(f"{'.'.join(path)} is {theirs!r} in the file and {mine!r} in"
                                " the plan; change one of them (the merge keeps both equal)",
                                option, theirs)
    merged = dict(config)
    notes = []
    for key, value in fragment.items():
        if key == "zero_optimization" and isinstance(value, dict):
            for k, v in value.items():
                if k in zero and zero[k] != v:
                    notes.append(f"zero_optimization.{k}: {zero[k]!r} replaced by {v!r}")
            merged[key] = {**zero, **value}
        else:
            if key in config and config[key] != value:
                notes.append(f"{key}: {config[key]!r} replaced by {value!r}")
            merged[key] = value
    return merged, notes


def merged_file(path: Path, fragment_text: str, taken: set[str]) -> tuple[str, str, list[str]]:
    """The merged config of ``path`` and the emitted ``deepspeed.json`` text: its file name
    (``path``'s, or ``merged_<name>`` when an emitted file has that name), its text and the
    notes of :func:`merge_ds_config`."""
    config = load_json(path, "--merge")
    merged, notes = merge_ds_config(config, json.loads(fragment_text))
    name = path.name if path.name not in taken else f"merged_{path.name}"
    return name, json.dumps(merged, indent=1) + "\n", notes


def _get(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc
