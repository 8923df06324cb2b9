"""The rules a config change must keep (DOMAIN §2 "Validation"), one small function each, by family:
`refusal` (what a refusal is, `RULES`), `names` (paths, tree and host names), `position` (where a
pool sits), `config` (one config by itself), `hierarchy` (a pool among the others),
`tree_options` (a tree's options and every pool under them) and `commands` (a whole upsert,
delete or host); each family imports only those above it.

Each `check_*` returns a `Refusal` naming the rule, with a message that says which pool, which
kind and which numbers (modelled on Peloton's respool validators), or None. `validate_*`
compose them in order and return the first refusal. Checks that compare pools look at the
*resolved* options (presets, then explicit) and at *declared* limits (a pool's, else the nearest
ancestor's, else unbounded: see `effective.declared_limits`), so that no answer depends on which
hosts happen to be up.

Two rules cannot fire on a path-addressed tree and are kept as guards of the invariant:
`reparent` (a path names its parent, so moving a pool means a new path, that is a new pool) and
`cycle` (a parent's path is a strict prefix of its child's). `sibling_clash` fires for names
that differ from a sibling's only in case (`/Org` next to `/org`); trailing slashes are
normalised (`/a/` is `/a`) and an empty name (`/a//b`, `//`) is refused.
"""
