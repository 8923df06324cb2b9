"""The scenario file format (SCENARIOS.md, "File format"): pydantic models, and `load_scenario`.

Every mapping of the format refuses unknown keys. Values are checked strictly for their type
(`tasks: "10"` is an error, not 10), but not for the domain's rules: an input in a step with an
unknown resource kind or a negative amount is loaded as written, and the system refuses it at
run time like any other bad input. The file's own setup (hosts, trees, initial pools) must be
sound: kinds in play, non-negative amounts, pools in a declared tree, parents first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from events import DEFAULT_KINDS, PoolConfig, TaskState, TreeOptions
from services.tools.scenario.checks import check_setup
from services.tools.scenario.errors import Loc, Problem, ScenarioError, format_place
from services.tools.scenario.problems import describe
from services.tools.scenario.report import GangState, QueueName, pool_key
from services.tools.scenario.source import Source, parse_text, read_source

DEFAULT_TREE = "default"
CAPACITY_HOST = "cluster"


def _scalar_name(value: Any) -> Any:
    """Names written as bare YAML numbers (`gang: 7`) are names all the same."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


Name = Annotated[str, BeforeValidator(_scalar_name)]
NonEmptyName = Annotated[str, BeforeValidator(_scalar_name), Field(min_length=1)]
Amounts = dict[Name, float]
Count = Annotated[int, Field(ge=1)]


def _none_as_empty_list(value: Any) -> Any:
    return [] if value is None else value


def _none_as_empty_dict(value: Any) -> Any:
    return {} if value is None else value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# --- setup -----------------------------------------------------------------------------------


class HostEntry(_Strict):
    """A host: `{name, resources, revocable, tags}` (also the value of a `host` step action)."""

    name: NonEmptyName
    resources: Amounts = {}
    revocable: Amounts = {}
    tags: list[Name] = []


class TreeEntry(TreeOptions):
    """A pool tree: its `name` and every tree option (DOMAIN.md section 2). A tree that does not
    set `resources` takes the scenario's."""

    model_config = ConfigDict(strict=True)

    name: NonEmptyName = DEFAULT_TREE

    def options(self, kinds: Sequence[str]) -> TreeOptions:
        data = {field: getattr(self, field) for field in TreeOptions.model_fields}
        if "resources" not in self.model_fields_set:
            data["resources"] = list(kinds)
        return TreeOptions.model_validate(data)


class PoolEntry(PoolConfig):
    """A pool: `path`, `tree`, and every pool option (DOMAIN.md section 2); also the value of a
    `pool` step action (an upsert: options left out keep their values)."""

    model_config = ConfigDict(strict=True)

    path: str
    tree: NonEmptyName | None = None

    def config(self) -> PoolConfig:
        """The explicit options, as the wire contract carries them."""
        return PoolConfig(**{field: getattr(self, field) for field in PoolConfig.model_fields})


# --- step actions ----------------------------------------------------------------------------


class EnqueueTask(_Strict):
    """One member of a `tasks` list; `resources` defaults to the enqueue's `resources`."""

    resources: Amounts | None = None


class Enqueue(_Strict):
    """Members of a gang arrive (or, with `count`, members of `count` alike gangs)."""

    gang: NonEmptyName
    pool: str
    tasks: Count | Annotated[list[EnqueueTask], Field(min_length=1)] = 1
    resources: Amounts = {}
    count: Count | None = None
    job: Name | None = None
    size: int | None = None
    user: Name | None = None
    priority: int | None = None
    preemptible: bool | None = None
    revocable: bool | None = None
    controller: bool | None = None
    timeout: float | None = None
    tree: NonEmptyName | None = None  # extension: which tree, when the scenario has several


class TaskChange(_Strict):
    """A task state reported from outside, for one task (`id`), a gang's tasks, or a pool's."""

    id: NonEmptyName | None = None
    gang: NonEmptyName | None = None
    pool: str | None = None
    state: TaskState
    tree: NonEmptyName | None = None

    @model_validator(mode="after")
    def _one_target(self) -> TaskChange:
        named = [k for k in ("id", "gang", "pool") if getattr(self, k) is not None]
        if len(named) != 1:
            got = ", ".join(named) if named else "none"
            raise ValueError(f"a task change names exactly one of `id`, `gang`, `pool` (got: {got})")
        return self


class AckPreemptions(_Strict):
    """`ack_preemptions: {}`: every task with a pending preemption request reports `preempted`."""


class PoolRef(_Strict):
    path: str
    tree: NonEmptyName | None = None


ACTION_KINDS: tuple[str, ...] = (
    "enqueue", "task", "ack_preemptions", "cancel", "pool", "delete_pool", "host", "remove_host",
)


class Action(_Strict):
    """One entry of a step's `do`: a mapping with exactly one key, the kind of action."""

    enqueue: Enqueue | None = None
    task: TaskChange | None = None
    ack_preemptions: AckPreemptions | None = None
    cancel: NonEmptyName | None = None
    pool: PoolEntry | None = None
    delete_pool: str | PoolRef | None = None
    host: HostEntry | None = None
    remove_host: NonEmptyName | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_key(cls, data: Any) -> Any:
        kinds = ", ".join(ACTION_KINDS)
        if not isinstance(data, dict):
            raise ValueError(f"an action is a mapping with one key, one of: {kinds}")
        if len(data) != 1:
            got = ", ".join(str(k) for k in data) or "none"
            raise ValueError(f"an action has exactly one key, one of: {kinds} (got: {got})")
        return data

    @model_validator(mode="after")
    def _has_value(self) -> Action:
        if self.kind != "ack_preemptions" and getattr(self, self.kind) is None:
            raise ValueError(f"`{self.kind}` needs a value")
        return self

    @property
    def kind(self) -> str:
        return next(iter(self.model_fields_set))


# --- expectations ----------------------------------------------------------------------------

ResourceExpectation = dict[Name, dict[Name, float]]


class Expectations(_Strict):
    """What must hold after a step (SCENARIOS.md, "Expectations"); every key optional."""

    entitlement: ResourceExpectation | None = None
    non_slack_entitlement: ResourceExpectation | None = None
    slack_entitlement: ResourceExpectation | None = None
    allocation: ResourceExpectation | None = None
    slack_allocation: ResourceExpectation | None = None
    demand: ResourceExpectation | None = None
    slack_demand: ResourceExpectation | None = None
    gangs: dict[Name, GangState] | None = None
    admitted: list[Name] | None = None
    pending: list[Name] | None = None
    admitted_order: list[Name] | None = None
    preempted: list[Name] | None = None
    preempted_count: dict[Name, Annotated[int, Field(ge=0)]] | None = None
    rejected: list[Name] | None = None
    timed_out: list[Name] | None = None
    requeued: list[Name] | None = None
    queues: dict[Name, QueueName] | None = None
    tasks: dict[Name, TaskState] | None = None
    absent: list[Name] | None = None


class Step(_Strict):
    at: Annotated[float, Field(ge=0)]
    do: Annotated[list[Action], BeforeValidator(_none_as_empty_list)] = []
    expect: Annotated[Expectations, BeforeValidator(_none_as_empty_dict)] = Expectations()


# --- the scenario ----------------------------------------------------------------------------


class Scenario(_Strict):
    name: NonEmptyName
    description: str | None = None
    resources: Annotated[list[NonEmptyName], Field(min_length=1)] = Field(
        default_factory=lambda: list(DEFAULT_KINDS)
    )
    capacity: Amounts | None = None
    hosts: list[HostEntry] | None = None
    trees: list[TreeEntry] | None = None
    pools: Annotated[list[PoolEntry], BeforeValidator(_none_as_empty_list)] = []
    steps: Annotated[list[Step], BeforeValidator(_none_as_empty_list)] = []

    _source: Source | None = PrivateAttr(default=None)

    @property
    def file(self) -> str:
        """The file it was loaded from."""
        return self._source.file if self._source is not None else "<scenario>"

    def error(self, loc: Loc, problem: str) -> ScenarioError:
        """A ScenarioError at a place of this file, with its line: for what only a run can find,
        e.g. `scenario.error(("pools", 2), "pool /a/b: reservation 50 exceeds limit 10")`."""
        line = self._source.line_of(loc) if self._source is not None else None
        return ScenarioError(self.file, format_place(loc), problem, line)

    def tree_entries(self) -> list[TreeEntry]:
        """The declared trees, or the one default tree."""
        return list(self.trees) if self.trees else [TreeEntry(name=DEFAULT_TREE)]

    def tree_options(self) -> dict[str, TreeOptions]:
        """Each tree's options, in declaration order (resources default to the scenario's)."""
        return {t.name: t.options(self.resources) for t in self.tree_entries()}

    @property
    def default_tree(self) -> str:
        """Where pools and inputs naming no tree go: the tree `default` if declared, else the first."""
        names = [t.name for t in self.tree_entries()]
        return DEFAULT_TREE if DEFAULT_TREE in names else names[0]

    @property
    def multi_tree(self) -> bool:
        return len(self.tree_entries()) > 1

    def pool_key(self, tree: str | None, path: str) -> str:
        """How reports and expectations name a pool of this scenario."""
        return pool_key(tree or self.default_tree, path, self.multi_tree)

    def host_entries(self) -> list[HostEntry]:
        """The initial hosts: `hosts`, or the single host `cluster` that `capacity` stands for."""
        if self.capacity is not None:
            return [HostEntry(name=CAPACITY_HOST, resources=dict(self.capacity))]
        return list(self.hosts or [])

    def known_kinds(self) -> list[str]:
        kinds = list(self.resources)
        for options in self.tree_options().values():
            kinds.extend(k for k in options.resources if k not in kinds)
        return kinds


# --- loading ---------------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file (YAML; `.json` files as JSON). Raises `ScenarioError`."""
    return _build(read_source(str(path)))


def parse_scenario(text: str, file: str = "<scenario>", fmt: str | None = None) -> Scenario:
    """Check a scenario given as text (`fmt`: `yaml`, `json`, or None to go by the file name)."""
    return _build(parse_text(text, file, fmt))


def _build(source: Source) -> Scenario:
    data = source.data
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        problem = f"a scenario is a mapping with at least `name` (the file is {what})"
        raise ScenarioError(source.file, "", problem, source.line_of(()))
    try:
        scenario = Scenario.model_validate(data, strict=True)
        check_setup(scenario)
    except ValidationError as exc:
        loc, problem = describe(exc, data, Scenario)
        raise ScenarioError(source.file, format_place(loc), problem, source.line_of(loc)) from None
    except Problem as exc:
        place = format_place(exc.loc)
        raise ScenarioError(source.file, place, exc.problem, source.line_of(exc.loc)) from None
    scenario._source = source
    return scenario
