"""The spec's YAML: YAML 1.2 booleans, and a key given twice refused, safely (a SafeLoader)."""

from __future__ import annotations

import re
from typing import Any

import yaml


class _Yaml12Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false. Under YAML 1.1, the contract's `retries: {on: ...}`
    key would load as the boolean True (and `off`, `yes`, `no` likewise). A key given twice in one
    mapping is refused, as YAML 1.2 says: PyYAML would keep the last silently (two variants of one name)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"{key!r} is given twice", key_node.start_mark
                )
            seen.add(key if isinstance(key, str | int | float | bool) else id(key_node))
        return super().construct_mapping(node, deep)


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_yaml(text: str) -> Any:
    """Plain data from YAML, safely (a SafeLoader), with YAML 1.2 booleans."""
    return yaml.load(text, Loader=_Yaml12Loader)
