"""The balancer's part of the configuration file: `balance:` in `strait.config.StraitConfig`.

    balance:
      capacities:              # per cluster named under `clusters:`
        big:
          "*": 100GB           # every dir of every broker
          "/data/ssd*": 2TB    # dirs matching a glob, on any broker
          3: 4TB               # every dir of broker 3
          "3:/data/d1": 1TB    # one dir of one broker
      disk_classes:            # storage tiers, per cluster (`strait.balancer.tiers`)
        big:
          "/data/ssd*": ssd
          "*": hdd
      clusters: [big]          # watch mode (`strait.balancer.watch`): the clusters the leader watches
      watch: true              # sample them every `interval_s`, alert and propose a plan
      execute: false           # also run the proposal through the executor
      after_s: 600             # how long out of balance before alerting and proposing
      interval_s: 30           # how often each cluster is sampled
      threshold: 0.10          # allowed spread of disk usage ratios (as `--threshold`)
      throttle: 20MB           # replication throttle (bytes/s) of executions the watch starts
      traffic: false           # measure traffic between samples: proposals balance it too, and
                               # place hot replicas on SSD where disk_classes are set
      traffic_spread: 0.25     # with traffic: broker network-in spread (max - min, over the mean)
      traffic_floor: 1MB       # above which traffic alone puts a cluster out of balance, once the
                               # spread is also above this many bytes/s (an idle cluster's noise is not)
      min_gain: 0.25           # execute a plan for a spread only if it promises to remove this share of
                               # the excess over the threshold; a plan that then does not keep half its
                               # promise makes the watch back off (after_s x 2, x 4, ...; `watch.py`)

Rule keys and precedence are described in `strait.balancer.capacity` (the same for disk
classes); `--capacity` and `--disk-class` on the command line override these rules dir by dir.
Everything is checked when the file is loaded, and an error names the cluster and the key.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from strait.balancer.capacity import Capacities, parse_key, parse_size, rules_of
from strait.balancer.tiers import DiskClasses, class_rules

Bytes = Annotated[int, BeforeValidator(parse_size)]


def _rate_or_zero(value: object) -> int:
    return 0 if not isinstance(value, bool) and value in (0, "0") else parse_size(value)


Rate = Annotated[int, BeforeValidator(_rate_or_zero)]  # bytes/s, as a size ("1MB"), or 0


class BalanceConfig(BaseModel):
    """Options of `strait balance` and the REST balancer that belong in the configuration file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capacities: dict[str, dict[str, Bytes]] = Field(default_factory=dict)
    disk_classes: dict[str, dict[str, str]] = Field(default_factory=dict)
    clusters: list[str] = Field(default_factory=list)
    watch: bool = False
    execute: bool = False
    after_s: float = Field(default=600.0, ge=0)
    interval_s: float = Field(default=30.0, gt=0)
    threshold: float = Field(default=0.10, gt=0, lt=1)
    throttle: Bytes | None = Field(default=None, gt=0)
    traffic: bool = False
    traffic_spread: float = Field(default=0.25, gt=0)
    traffic_floor: Rate = Field(default=1_000_000, ge=0)
    min_gain: float = Field(default=0.25, ge=0, le=1)

    @model_validator(mode="after")
    def _watch_needs_clusters(self) -> BalanceConfig:
        if self.execute and not self.watch:
            raise ValueError("balance.execute runs what the watch mode proposes: set balance.watch: true too")
        if self.watch and not self.clusters:
            raise ValueError("balance.watch: name the clusters to watch under balance.clusters")
        return self

    def watched(self) -> list[str]:
        """The clusters the leader watches (none unless `watch` is on)."""
        return list(dict.fromkeys(self.clusters)) if self.watch else []

    @field_validator("capacities", "disk_classes", mode="before")
    @classmethod
    def _keys_as_text(cls, value: Any) -> Any:
        # YAML reads `3: 2TB` with an int key; rule keys are text.
        if not isinstance(value, Mapping):
            return value
        out: dict[Any, Any] = {}
        for name, rules in value.items():
            if isinstance(rules, Mapping):
                for key in rules:
                    try:
                        parse_key(key)
                    except ValueError as exc:
                        raise ValueError(f"{name}: {exc}") from None
                rules = {str(k): v for k, v in rules.items()}
            out[name] = rules
        return out

    @field_validator("capacities")
    @classmethod
    def _distinct_rules(cls, value: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        for name, rules in value.items():
            try:
                rules_of(rules)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return value

    @field_validator("disk_classes")
    @classmethod
    def _known_classes(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for name, rules in value.items():
            try:
                class_rules(rules)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return {name: {k: v.strip().lower() for k, v in rules.items()} for name, rules in value.items()}

    def classes_of(self, cluster: str) -> DiskClasses:
        """The configured disk classes of `cluster` (none: an empty `DiskClasses`)."""
        return DiskClasses.of(self.disk_classes.get(cluster))

    def capacities_of(self, cluster: str) -> Capacities:
        """The configured capacity rules of `cluster` (none: an empty `Capacities`)."""
        return Capacities.of(self.capacities.get(cluster))

    def unknown_clusters(self, clusters: Collection[str]) -> list[str]:
        """Cluster names under `balance.capacities`, `balance.disk_classes` or `balance.clusters` that
        `clusters:` does not define."""
        return sorted((set(self.capacities) | set(self.disk_classes) | set(self.clusters)) - set(clusters))
