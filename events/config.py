"""Configuration values carried by pool and tree events (DOMAIN.md section 2).

A `PoolConfig` holds only what an operator set explicitly; `None` means "not set: take the
preset, the tree default or the documented default". Numbers are not range-checked here: the
tree service's validator refuses bad values with a message naming the rule and the numbers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from events.base import Frozen

DEFAULT_KINDS: tuple[str, ...] = ("cpu", "memory", "disk", "gpu")

Policy = Literal["per_resource", "dominant", "hdrf"]
Mode = Literal["fifo", "fair_share"]
ReservationType = Literal["elastic", "static"]
FifoKey = Literal["priority", "arrival", "pending_tasks"]


class PoolConfig(Frozen):
    """The explicit options of one pool. Every field is optional; see DOMAIN.md section 2."""

    reservation: dict[str, float] | None = None
    limit: dict[str, float] | None = None
    share: float | dict[str, float] | None = None
    reservation_type: ReservationType | None = None
    controller_limit: float | None = None
    slack_limit: float | None = None
    mode: Mode | None = None
    fifo_sort: list[FifoKey] | None = None
    max_running_jobs: int | None = None
    max_jobs: int | None = None
    create_ephemeral_subpools: bool | None = None
    ephemeral_subpool_config: PoolConfig | None = None
    preempt_lower_priority: bool | None = None
    config_presets: list[str] | None = None

    def merged(self, update: PoolConfig) -> PoolConfig:
        """This config with every option that `update` sets replacing ours (maps replaced whole)."""
        data = self.model_dump(exclude_none=True)
        data.update(update.model_dump(exclude_none=True))
        return PoolConfig.model_validate(data)


class PreemptionOptions(Frozen):
    enabled: bool = True
    grace: float = Field(default=30.0, ge=0)


class GangTimeoutOptions(Frozen):
    default: float = Field(default=30.0, ge=0)
    limit: float = Field(default=100.0, ge=0)
    jitter: float = Field(default=30.0, ge=0)


class TreeOptions(Frozen):
    """Options of one pool tree (DOMAIN.md section 2, tree options)."""

    policy: Policy = "per_resource"
    resources: list[str] = Field(default_factory=lambda: list(DEFAULT_KINDS))
    node_tag_filter: list[str] | None = None
    default_parent_pool: str | None = None
    max_ephemeral_pools_per_user: int = Field(default=1, ge=0)
    max_running_jobs_per_pool: int | None = Field(default=None, ge=0)
    max_jobs_per_pool: int | None = Field(default=None, ge=0)
    pool_config_presets: dict[str, PoolConfig] = Field(default_factory=dict)
    preemption: PreemptionOptions = Field(default_factory=PreemptionOptions)
    starvation_timeout: float = Field(default=30.0, ge=0)
    starvation_tolerance: float = Field(default=0.8, ge=0, le=1)
    gang_timeout: GangTimeoutOptions = Field(default_factory=GangTimeoutOptions)
    allocation_slack: bool = False
    # poolwise's own (not in DOMAIN.md): an input message after which the tree holds this many
    # gangs made pending since its last admission cycle starts a cycle at its end, as a tick does
    # (a burst is decided as it is folded). Written into every TreeConfigured, so a log keeps the
    # value its cycles were started by.
    cycle_gangs: int = Field(default=5000, ge=1)
    # poolwise's own: the most members a gang may have (its declared `size`). A gang is admitted in
    # one `GangAdmitted` that lists every member, and one log message holds at most the server's
    # payload (1 MiB by default): a gang too large for it is refused when it comes (rule
    # `gang_too_large`; its members' bytes on the wire are bounded too, whatever this says).
    max_tasks_per_gang: int = Field(default=10_000, ge=1)
    # poolwise's own: seconds of log time a finished gang (done, cancelled, timed out, rejected) is
    # remembered by admission, preemption and explain; then it is forgotten (what comes for it
    # later is refused with rule `gang_forgotten`, and its id stays used: docs/architecture.md,
    # "Retention"). None: never forgotten (memory grows with every gang ever run).
    gang_retention: float | None = Field(default=3600.0, ge=0)

    @model_serializer(mode="wrap")
    def _never_forgotten_on_the_wire(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """`gang_retention: null` is written, not left out: the log is encoded with `exclude_none`,
        and a left-out field reads back as its default (3600 s), so "never forgotten" was lost on
        the way through the log. Every other field's bytes are unchanged."""
        written: dict[str, object] = handler(self)
        if self.gang_retention is None:
            written["gang_retention"] = None
        return written
