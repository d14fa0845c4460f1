"""The shape every part of metrics.json shares: its keys are its dataclass fields, its notes say why."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Self


@dataclass(kw_only=True)
class Part:
    """A group of metrics.json's keys. `notes` maps a key (of this part or an earlier one) to why its
    value is null, or what it is based on; it is not a metric itself."""

    notes: dict[str, str] = field(default_factory=dict)

    def items(self) -> Iterator[tuple[str, Any]]:
        """The part's keys and values, in the dataclass's (metrics.json's) order."""
        for f in fields(self):
            if f.name != "notes":
                yield f.name, getattr(self, f.name)

    @classmethod
    def keys(cls) -> list[str]:
        """The keys this part writes, without building one."""
        return [f.name for f in fields(cls) if f.name != "notes"]

    @classmethod
    def null(cls, why: str, **values: Any) -> Self:
        """Every key of this part null (except `values`), each with the reason `why`."""
        part = cls(**{key: values.get(key) for key in cls.keys()})  # type: ignore[arg-type]
        part.notes.update({key: why for key in cls.keys() if key not in values})
        return part


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den, None when either is unknown or den is 0 (nothing to divide by is not infinity)."""
    return num / den if num is not None and den else None
