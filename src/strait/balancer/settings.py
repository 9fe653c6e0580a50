"""The balancer's part of the configuration file: `balance:` in `strait.config.StraitConfig`.

    balance:
      capacities:              # per cluster named under `clusters:`
        big:
          "*": 100GB           # every dir of every broker
          "/data/ssd*": 2TB    # dirs matching a glob, on any broker
          3: 4TB               # every dir of broker 3
          "3:/data/d1": 1TB    # one dir of one broker

Rule keys and precedence are described in `strait.balancer.capacity`; `--capacity` on the
command line overrides these rules dir by dir. Everything is checked when the file is loaded, and
an error names the cluster and the key.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from strait.balancer.capacity import Capacities, parse_key, parse_size, rules_of

Bytes = Annotated[int, BeforeValidator(parse_size)]


class BalanceConfig(BaseModel):
    """Options of `strait balance` and the REST balancer that belong in the configuration file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capacities: dict[str, dict[str, Bytes]] = Field(default_factory=dict)

    @field_validator("capacities", mode="before")
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

    def capacities_of(self, cluster: str) -> Capacities:
        """The configured capacity rules of `cluster` (none: an empty `Capacities`)."""
        return Capacities.of(self.capacities.get(cluster))

    def unknown_clusters(self, clusters: Collection[str]) -> list[str]:
        """Cluster names under `balance.capacities` that `clusters:` does not define."""
        return sorted(set(self.capacities) - set(clusters))
