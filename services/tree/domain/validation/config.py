"""The rules one pool config keeps by itself: kinds, signs, ranges, job limits, presets, its
`ephemeral_subpool_config`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from events import PoolConfig, TreeOptions
from services.tree.domain.amounts import spell
from services.tree.domain.presets import missing_presets
from services.tree.domain.validation.refusal import Refusal, field_path, first


def check_kinds_unique(option: str, values: Mapping[str, float], prefix: str = "config.") -> Refusal | None:
    """Two keys that name the same kind up to case or spaces (`cpu`, `CPU`)."""
    seen: dict[str, str] = {}
    for kind in values:
        key = kind.strip().lower()
        if key in seen:
            return Refusal("duplicate_kind", f"resource {key} is given twice in {option} (`{seen[key]}` and "
                                             f"`{kind}`)", field_path(prefix, option, kind))
        seen[key] = kind
    return None


def check_kinds_known(option: str, values: Mapping[str, float], kinds: Sequence[str],
                      prefix: str = "config.") -> Refusal | None:
    for kind in values:
        if kind not in kinds:
            return Refusal("unknown_kind", f"resource {kind} in {option} is not a kind of this tree "
                                           f"(kinds: {', '.join(kinds)})", field_path(prefix, option, kind))
    return None


def check_not_negative(option: str, values: Mapping[str, float], prefix: str = "config.") -> Refusal | None:
    for kind, amount in values.items():
        if amount < 0:
            return Refusal("negative_value", f"resource {kind}, {option} {spell(amount)} is negative",
                           field_path(prefix, option, kind))
    return None


def check_share_positive(share: float | Mapping[str, float] | None,
                         prefix: str = "config.") -> Refusal | None:
    if share is None:
        return None
    if isinstance(share, Mapping):
        for kind, weight in share.items():
            if weight <= 0:
                return Refusal("share_not_positive", f"resource {kind}, share {spell(weight)} must be "
                                                     "greater than 0", field_path(prefix, "share", kind))
        return None
    if share <= 0:
        return Refusal("share_not_positive", f"share {spell(share)} must be greater than 0",
                       field_path(prefix, "share"))
    return None


def check_percent(option: str, value: float | None, prefix: str = "config.") -> Refusal | None:
    if value is not None and not 0 <= value <= 100:
        return Refusal("percent_range", f"{option} {spell(value)} is outside 0..100 (a percent of the "
                                        "reservation)", field_path(prefix, option))
    return None


def check_job_limit_not_negative(option: str, value: int | None, prefix: str = "config.") -> Refusal | None:
    if value is not None and value < 0:
        return Refusal("job_limit_negative", f"{option} {value} is negative", field_path(prefix, option))
    return None


def check_job_limits_order(running: int | None, total: int | None, field: str | None,
                           where: str = "") -> Refusal | None:
    """`max_running_jobs <= max_jobs` (`where` says where an inherited value comes from)."""
    if running is not None and total is not None and running > total:
        return Refusal("job_limits_order", f"max_running_jobs {running} exceeds max_jobs {total}{where}",
                       field)
    return None


def check_presets_known(config: PoolConfig, options: TreeOptions, prefix: str = "config.") -> Refusal | None:
    missing = missing_presets(options, config)
    if missing:
        defined = ", ".join(sorted(options.pool_config_presets)) or "none"
        return Refusal("unknown_preset", f"preset `{missing[0]}` is not defined in this tree (presets: "
                                         f"{defined})", field_path(prefix, "config_presets"))
    return None


def check_preset_not_nested(name: str, preset: PoolConfig) -> Refusal | None:
    if preset.config_presets:
        return Refusal("preset_nested", f"preset `{name}` names presets itself "
                                        f"({', '.join(preset.config_presets)}); presets do not nest",
                       f"options.pool_config_presets.{name}.config_presets")
    return None


def check_subpool_no_reservation(config: PoolConfig, prefix: str = "config.") -> Refusal | None:
    sub = config.ephemeral_subpool_config
    if sub is not None and sub.reservation and any(v > 0 for v in sub.reservation.values()):
        return Refusal("ephemeral_reservation",
                       f"ephemeral_subpool_config cannot set a reservation ({spell_map(sub.reservation)}): "
                       "ephemeral pools come and go, and their guarantees would not add up",
                       field_path(prefix, "ephemeral_subpool_config", "reservation"))
    return None


def spell_map(values: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {spell(v)}" for k, v in values.items())


def _config_checks(config: PoolConfig, options: TreeOptions, prefix: str) -> Iterator[Refusal | None]:
    maps = {"reservation": config.reservation, "limit": config.limit}
    if isinstance(config.share, dict):
        maps["share"] = config.share
    for option, values in maps.items():
        if values:
            yield check_kinds_unique(option, values, prefix)
            yield check_kinds_known(option, values, options.resources, prefix)
    for option in ("reservation", "limit"):
        values = maps[option]
        if values:
            yield check_not_negative(option, values, prefix)
    yield check_share_positive(config.share, prefix)
    yield check_percent("controller_limit", config.controller_limit, prefix)
    yield check_percent("slack_limit", config.slack_limit, prefix)
    yield check_job_limit_not_negative("max_running_jobs", config.max_running_jobs, prefix)
    yield check_job_limit_not_negative("max_jobs", config.max_jobs, prefix)
    yield check_job_limits_order(config.max_running_jobs, config.max_jobs, field_path(prefix, "max_running_jobs"))
    yield check_presets_known(config, options, prefix)


def check_config(config: PoolConfig, options: TreeOptions, prefix: str = "config.") -> Refusal | None:
    """The rules one config keeps by itself (kinds, signs, ranges, presets), its
    `ephemeral_subpool_config` included."""
    sub = config.ephemeral_subpool_config
    return first([
        first(_config_checks(config, options, prefix)),
        check_subpool_no_reservation(config, prefix),
        None if sub is None else check_config(sub, options, field_path(prefix, "ephemeral_subpool_config") + "."),
    ])
