"""Pool config presets (YTsaurus `pool_config_presets`): named partial configs of a tree.

A pool's `config_presets` are applied in the order named, each over the previous one, and the
pool's own explicit options over all of them. A preset's own `config_presets` is not followed
(presets do not nest: `validation.check_preset_not_nested` refuses a tree that tries).
"""

from __future__ import annotations

from events import PoolConfig, TreeOptions


def resolved_config(options: TreeOptions, explicit: PoolConfig) -> PoolConfig:
    """`explicit` over its presets. Unknown preset names are skipped here (validation refuses
    them before they reach the log)."""
    names = explicit.config_presets or []
    if not names:
        return explicit
    result = PoolConfig()
    for name in names:
        preset = options.pool_config_presets.get(name)
        if preset is not None:
            result = result.merged(preset.model_copy(update={"config_presets": None}))
    return result.merged(explicit)


def missing_presets(options: TreeOptions, config: PoolConfig) -> list[str]:
    """The names in `config.config_presets` that the tree does not define."""
    return [n for n in config.config_presets or [] if n not in options.pool_config_presets]
