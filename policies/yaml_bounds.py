"""The bounds on what the configuration loader accepts, and the YAML loader that keeps them.

A configuration is a few KiB; a hostile file must cost at most about as much as its own size, never
the size of what its aliases expand to (the "billion laughs"). :class:`BoundedLoader` is PyYAML's
SafeLoader that refuses, with a marked error (so the message names the line):

- more than ``MAX_NODES`` values, each alias counted as the whole node it repeats;
- nesting deeper than ``MAX_DEPTH`` (the composer recurses per level);
- an alias inside the node it names (a recursive value);
- an integer written with more than ``MAX_INT_CHARS`` characters.

``MAX_CONFIG_BYTES`` bounds the text itself (the caller checks it). Pure: one loader per document.
"""

from __future__ import annotations

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

__all__ = ["MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_INT_CHARS", "MAX_NODES", "BoundedLoader"]

MAX_CONFIG_BYTES = 256 * 1024   # a configuration of a thousand logs is about 150 KiB; PyYAML reads ~100 KiB/s loaded
MAX_NODES = 100_000
MAX_DEPTH = 50
MAX_INT_CHARS = 40


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with the bounds of this module; see the module docstring."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._values = 0          # values composed so far, an alias counted as its whole node
        self._depth = 0
        self._sizes: dict[int, int] = {}   # id(anchored node) -> its expanded size, once composed

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:
                raise ComposerError(None, None, f"the alias *{event.anchor} is inside the node it names "
                                    "(a recursive value)", event.start_mark)
            self._count(size, event)
            return node
        if self._depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        before = self._values
        self._count(1, event)
        self._depth += 1
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._sizes[id(node)] = self._values - before
        return node

    def _count(self, values: int, event) -> None:
        self._values += values
        if self._values > MAX_NODES:
            raise ComposerError(None, None, f"more than {MAX_NODES} values (aliases counted as what they "
                                "repeat); a configuration has a few hundred", event.start_mark)

    def construct_bounded_int(self, node):
        if len(node.value) > MAX_INT_CHARS:
            raise ConstructorError(None, None, f"an integer of {len(node.value)} characters; at most "
                                   f"{MAX_INT_CHARS} are read", node.start_mark)
        return self.construct_yaml_int(node)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_bounded_int)
