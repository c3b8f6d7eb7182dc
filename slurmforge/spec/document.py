"""YAML text -> plain data (dicts with string keys, lists, scalars), within bounds.

PyYAML's own loaders are not used: their constructors raise TypeError, ValueError or
IndexError on some inputs (`!!int x`, a list as a key), they expand aliases without limit
(a few kilobytes of aliases can name billions of values) and they recurse once per level
of nesting (a deep `[[[...]]]` overflows Python's stack or, with libyaml, the C stack).
Here the parser's events are composed by one loop that keeps explicit bounds:

- `MAX_DEPTH` levels of nesting (a spec needs about 6),
- `MAX_VALUES` values in all, counting each alias as a copy of what it names,
- `MAX_NUMBER_CHARS` characters in a number (int() of a long one is quadratic),

and refuses what has no meaning in a spec: tags other than YAML's core scalar tags,
recursive aliases, lists or mappings as keys, two equal keys, several documents.

Keys are kept as written (`on:` and `1:` are the keys 'on' and '1', not True and 1): every
key of a spec is a field name, a pool name or a tag name. Merge keys work as in YAML 1.1:
`<<: *defaults` (or a list of aliases) copies the keys the mapping does not set itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from sys import intern
from typing import Any

import yaml

# 100,000 users with an SSH key each are some 20 MB; time and memory are bounded by
# MAX_VALUES, not by the bytes (a long string costs little).
MAX_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 64
MAX_VALUES = 2_000_000
MAX_NUMBER_CHARS = 100
# Key names shared as one string each (a spec has a few hundred; more are kept as read).
MAX_KEY_NAMES = 10_000

CORE = "tag:yaml.org,2002:"
MERGE_KEY = "<<"

_PARSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML was built with it
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_NUMBERS = {"int": _CONSTRUCTOR.construct_yaml_int, "float": _CONSTRUCTOR.construct_yaml_float}


class YamlProblem(Exception):
    """Text that is YAML but not a spec's YAML: what, where (a parser mark) and the fix."""

    def __init__(self, message: str, fix: str, mark: Any = None, note: str = "") -> None:
        super().__init__(message)
        self.message, self.fix, self.mark, self.note = message, fix, mark, note

    def text(self) -> str:
        """'message at line L, column C (note)'."""
        mark = self.mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.message}{where}{note}"


def short_tag(tag: str) -> str:
    text = f"!!{tag.removeprefix(CORE)}" if tag.startswith(CORE) else tag
    return text if len(text) <= 40 else f"{text[:37]}..."


@dataclass(slots=True)
class _Anchor:
    value: object
    size: int
    text: str | None  # a scalar's text (so an alias of it can be a key)


@dataclass(slots=True)
class _Open:
    """A sequence or mapping being read."""

    value: Any  # a dict[str, Any] when is_map, else a list[Any]
    mark: Any
    anchor: str | None
    is_map: bool
    first: int = 0
    """The values counted when it opened: its size (itself, its items, every alias in it as
    a copy of what it names) is the count when it closes less this."""
    key: str | None = None
    merging: bool = False
    merges: list[dict[str, Any]] = field(default_factory=list)


_UNSET: Any = object()


class _Composer:
    """Events -> data. `run` is one loop with the common events handled inline (a plain
    scalar, a plain collection opening or closing): a 10 MB spec is about 1.6 million
    events, and a method call per event would double the time."""

    def __init__(self) -> None:
        self.stack: list[_Open] = []
        self.anchors: dict[str, _Anchor] = {}
        self.open_anchors: set[str] = set()
        self.values = 0
        self.documents = 0
        self.result: object = None

    def run(self, parser: Any) -> object:
        stack, get_event = self.stack, parser.get_event
        scalar_class, stream_end = yaml.ScalarEvent, yaml.StreamEndEvent
        map_start, seq_start = yaml.MappingStartEvent, yaml.SequenceStartEvent
        closers = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
        implicit_starts = _IMPLICIT
        while True:
            event = get_event()
            kind = event.__class__
            if kind is scalar_class:
                top = stack[-1] if stack else None
                if top is None or top.merging or event.anchor or event.tag is not None:
                    self._scalar_event(event)
                    continue
                text = event.value
                if top.is_map and top.key is None:  # a key: kept as written
                    if text in top.value or text == MERGE_KEY:
                        self._scalar_event(event)
                    else:
                        # one string per key name: 100,000 mappings share their few names
                        top.key = intern(text)
                        self.values += 1
                    continue
                if not event.implicit[0]:
                    value: object = text
                elif text.isdigit() and text.isascii() and text[0] != "0" and len(text) < 19:
                    value = int(text)  # the common number, without the resolver's patterns
                elif text[:1] in implicit_starts:
                    value = _plain_value(text, event.start_mark)
                else:
                    value = text
                self.values += 1
                if self.values > MAX_VALUES:
                    self._count_exceeded(event.start_mark)
                if top.is_map:
                    top.value[top.key] = value
                    top.key = None
                else:
                    top.value.append(value)
            elif (kind is map_start or kind is seq_start) and event.tag is None and event.anchor is None \
                    and len(stack) < MAX_DEPTH:
                stack.append(_Open({} if kind is map_start else [], event.start_mark, None, kind is map_start,
                                   self.values))
            elif kind in closers and len(stack) > 1 and _is_plain_end(stack[-1], stack[-2]):
                done = stack.pop()
                top = stack[-1]
                self.values += 1
                if top.is_map:
                    top.value[top.key] = done.value
                    top.key = None
                else:
                    top.value.append(done.value)
            elif kind is stream_end:
                if self.values > MAX_VALUES:
                    raise YamlProblem(f"more than {MAX_VALUES:,} values", "a spec is far smaller")
                return self.result
            else:
                self._structure(event)

    def _scalar_event(self, event: yaml.ScalarEvent) -> None:
        """A scalar the loop does not take inline: with an anchor or a tag, a duplicate or
        merge key, a merge source, or the whole document."""
        stack = self.stack
        text = event.value
        top = stack[-1] if stack else None
        if top is not None and top.is_map and top.key is None and not top.merging:  # a key: kept as written
            if event.tag is None and text not in top.value and text != MERGE_KEY:
                top.key = intern(text)
                self.values += 1
                if event.anchor:
                    self.anchors[event.anchor] = _Anchor(text, 1, text)
            else:  # a tag to check, a duplicate or a merge key
                self._scalar(event)
            return
        self._scalar(event, scalar_value(event))

    def _scalar(self, event: yaml.ScalarEvent, value: object = _UNSET) -> None:
        """A scalar off the common path: with an anchor, a tag on a key, a merge key, the
        whole document, or a duplicate key."""
        if value is _UNSET:
            value = scalar_value(event)
        if event.anchor:
            self.anchors[event.anchor] = _Anchor(value, 1, event.value)
        self.values += 1
        merge_key = event.value == MERGE_KEY and event.tag is None and event.implicit[0]
        self._add(value, event.start_mark, event.value, merge_key)

    def _structure(self, event: yaml.Event) -> None:
        handler = _HANDLERS.get(event.__class__)
        if handler is not None:
            handler(self, event)

    def _document(self, event: yaml.DocumentStartEvent) -> None:
        self.documents += 1
        if self.documents > 1:
            raise YamlProblem("a second YAML document ('---')", "keep the whole spec in one document",
                              event.start_mark)

    def _alias(self, event: yaml.AliasEvent) -> None:
        name = event.anchor or ""
        if name in self.open_anchors:
            raise YamlProblem(f"alias *{_clip(name)} is inside the node it names (a recursive structure)",
                              "a spec is a tree: copy the values instead", event.start_mark)
        anchor = self.anchors.get(name)
        if anchor is None:
            raise YamlProblem(f"alias *{_clip(name)} names no anchor defined before it",
                              f"define &{_clip(name)} on a value above the alias", event.start_mark)
        self.values += anchor.size
        self._add(anchor.value, event.start_mark, anchor.text, False)

    def _start(self, event: yaml.SequenceStartEvent | yaml.MappingStartEvent) -> None:
        is_map = isinstance(event, yaml.MappingStartEvent)
        expected = f"{CORE}map" if is_map else f"{CORE}seq"
        if event.tag not in (None, "!", expected):
            raise _misplaced_tag(event.tag or "", "a mapping" if is_map else "a list", event.start_mark)
        if len(self.stack) >= MAX_DEPTH:
            raise YamlProblem(f"nesting deeper than {MAX_DEPTH} levels", "a spec nests about 6 levels deep: "
                              "close the brackets you opened", event.start_mark)
        if event.anchor:
            self.open_anchors.add(event.anchor)
        self.stack.append(_Open({} if is_map else [], event.start_mark, event.anchor, is_map, self.values))

    def _end(self, event: yaml.Event) -> None:
        done = self.stack.pop()
        value: object = done.value
        if done.merges:
            merged: dict[str, Any] = {}
            for source in reversed(done.merges):  # the first one named wins
                merged.update(source)
            merged.update(done.value)  # and the mapping's own keys win over all
            value = merged
        self.values += 1  # its items are counted already
        if done.anchor:
            self.open_anchors.discard(done.anchor)
            self.anchors[done.anchor] = _Anchor(value, self.values - done.first, None)
        self._add(value, done.mark, None, False)

    @staticmethod
    def _count_exceeded(mark: Any) -> None:
        raise YamlProblem(f"more than {MAX_VALUES:,} values (counting every alias as a copy of what it names)",
                          "a spec is far smaller: look for aliases that name aliases", mark)

    def _add(self, value: object, mark: Any, text: str | None, merge_key: bool) -> None:
        """Put a value (counted already) into the collection being read."""
        if self.values > MAX_VALUES:  # checked here for collections and aliases
            self._count_exceeded(mark)
        if not self.stack:
            self.result = value
            return
        top = self.stack[-1]
        if isinstance(top.value, list):
            top.value.append(value)
        elif top.key is None and not top.merging:
            self._key(top, text, mark, merge_key)
        else:
            self._value(top, value, mark)

    @staticmethod
    def _key(top: _Open, text: str | None, mark: Any, merge_key: bool) -> None:
        if text is None:
            raise YamlProblem("a list or mapping used as a key", "keys are names: write 'name: value'", mark)
        assert isinstance(top.value, dict)
        if text in top.value or (merge_key and top.merges):
            raise YamlProblem(f"duplicate key '{_clip(text)}'", "merge the two into one key", mark,
                              "YAML would keep only the last one")
        if merge_key:
            top.merging = True
        else:
            top.key = text

    @staticmethod
    def _value(top: _Open, value: object, mark: Any) -> None:
        assert isinstance(top.value, dict)
        if top.merging:
            sources: list[Any] = value if isinstance(value, list) else [value]
            if not sources or not all(isinstance(s, dict) for s in sources):
                raise YamlProblem("'<<' merges mappings only", "write '<<: *name' where &name is on a mapping, "
                                  "or '<<: [*a, *b]'", mark)
            top.merges.extend(sources)
            top.merging = False
            return
        assert top.key is not None
        top.value[top.key] = value
        top.key = None


_HANDLERS: dict[type, Any] = {
    yaml.AliasEvent: _Composer._alias,
    yaml.SequenceStartEvent: _Composer._start,
    yaml.MappingStartEvent: _Composer._start,
    yaml.SequenceEndEvent: _Composer._end,
    yaml.MappingEndEvent: _Composer._end,
    yaml.DocumentStartEvent: _Composer._document,
}
_IMPLICIT = yaml.resolver.Resolver.yaml_implicit_resolvers


def _is_plain_end(done: _Open, top: _Open) -> bool:
    """Can a finished collection go straight into its parent: no merge, no anchor, and
    the parent expects a value (not a key, not a merge source)?"""
    return not done.merges and done.anchor is None and not top.merging and (not top.is_map or top.key is not None)


def _plain_value(text: str, mark: Any) -> object:
    """A plain (unquoted, untagged) scalar: YAML 1.1's implicit types, by the resolver's
    own patterns (looked up by first character, as PyYAML does); dates stay text."""
    for tag, pattern in _IMPLICIT.get(text[:1] if text else "", ()):
        if pattern.match(text):
            kind = tag.removeprefix(CORE)
            if kind in ("int", "float"):
                return _number(kind, text, mark)
            if kind == "bool":
                return _CONSTRUCTOR.bool_values[text.lower()]
            return None if kind == "null" else text  # timestamp, merge, value: the text
    return text


def scalar_value(event: yaml.ScalarEvent) -> object:
    """The value of a scalar: YAML 1.1's implicit types (plain `1`, `true`, `~`), or its
    explicit core tag. A date stays the text it is (no field of a spec is a date)."""
    tag, text = event.tag, event.value
    if tag is None:
        return _plain_value(text, event.start_mark) if event.implicit[0] else text
    kind = tag.removeprefix(CORE) if tag.startswith(CORE) else ""
    if tag == "!" or kind == "str":
        return text
    if kind == "null":
        return None
    if kind == "bool":
        if text.lower() not in _CONSTRUCTOR.bool_values:
            raise YamlProblem(f"!!bool on {_clip(text)!r}", "use true or false (or drop the tag)", event.start_mark)
        return _CONSTRUCTOR.bool_values[text.lower()]
    if kind in _NUMBERS:
        return _number(kind, text, event.start_mark)
    raise _misplaced_tag(tag, "a scalar", event.start_mark)


def _number(kind: str, text: str, mark: Any) -> object:
    what = "a whole number" if kind == "int" else "a number"
    if len(text) > MAX_NUMBER_CHARS:
        raise YamlProblem(f"a number of {len(text):,} characters", f"use {what} of at most {MAX_NUMBER_CHARS} "
                          "characters (or quote the text)", mark)
    if kind == "int" and text.isdigit() and (text[0] != "0" or text == "0"):  # the common case, fast
        return int(text)
    try:
        return _NUMBERS[kind](yaml.ScalarNode(f"{CORE}{kind}", text))
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, OverflowError):
        raise YamlProblem(f"!!{kind} on {_clip(text)!r}", f"use {what} (or drop the tag)", mark) from None


_SCALAR_TAGS = {f"{CORE}{kind}" for kind in ("str", "int", "float", "bool", "null")}
_COLLECTION_TAGS = {f"{CORE}map", f"{CORE}seq"}


def _misplaced_tag(tag: str, node: str, mark: Any) -> YamlProblem:
    """A tag on the wrong kind of node (!!str on a mapping), or one a spec has no use for."""
    if tag in _SCALAR_TAGS | _COLLECTION_TAGS:
        return YamlProblem(f"YAML tag {short_tag(tag)} on {node}", "remove the tag", mark)
    return YamlProblem(f"YAML tag {short_tag(tag)} has no meaning in a spec", "remove the tag (a spec holds "
                       "mappings, lists, strings, numbers and booleans)", mark)


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def read_yaml(text: str) -> object:
    """The data in `text`. Raises YamlProblem for what a spec cannot hold and yaml.YAMLError
    (with a mark) for text that is not YAML."""
    if len(text) > MAX_BYTES:
        raise YamlProblem(f"{len(text):,} characters, more than {MAX_BYTES // 2**20} MiB",
                          "a spec is a few kilobytes: pass your cluster.yaml")
    try:
        return _compose(_PARSER, text)
    except yaml.MarkedYAMLError as exc:
        # libyaml 0.2.6 scans flow brackets ahead of its events and stops at its own depth
        # limit (1,000) before the composer sees level MAX_DEPTH; PyYAML's own parser (no
        # limit, no recursion, slower) finds the level where a spec's nesting went wrong
        if _PARSER is yaml.SafeLoader or "nesting depth" not in (exc.problem or ""):
            raise
        return _compose(yaml.SafeLoader, text)


def _compose(loader: Any, text: str) -> object:
    parser = loader(text)
    try:
        return _Composer().run(parser)
    finally:
        parser.dispose()
