"""`ls --by FIELD`'s output: consumers rolled up by a metadata field, as a table, JSON or
CSV (`redis_presence.rollup`'s rows; names shown as `render` shows them)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from redis_presence.rollup import RollupRow

from .render import Column, Styler, csv_cell, shown, text_table

ROLLUP_FIELDS = (
    "value",
    "consumers",
    "active",
    "stale",
    "expired",
    "stuck",
    "groups",
    "leases",
    "leases_expired",
    "drained",
    "draining",
    "capacity",
)


def _columns(field: str) -> tuple[Column, ...]:
    return (
        Column(field.upper(), name=True),
        Column("CONSUMERS", right=True),
        Column("ACTIVE", right=True),
        Column("STALE", right=True),
        Column("EXPIRED", right=True),
        Column("STUCK", right=True),
        Column("GROUPS", right=True),
        Column("LEASES", right=True),
        Column("LEASES OF EXPIRED", right=True, style=lambda c: "bold red" if c != "0" else ""),
        Column("", style=lambda cell: "dim" if cell else ""),
    )


def render_rollup(
    rows: Sequence[RollupRow],
    field: str,
    fmt: str,
    styler: Styler,
    width: int | None = None,
    empty: str = "(no consumers)",
) -> str:
    """`rows` in one of `options.FORMATS`: JSON and CSV name a value null (empty) for the
    consumers without the field or with unreadable metadata, and carry its `label`."""
    if fmt == "json":
        data = [row.to_dict() for row in rows]
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(("label", *ROLLUP_FIELDS))
        for row in rows:
            fields = row.to_dict()
            value = "" if row.value is None else csv_cell(row.value)
            writer.writerow(
                (
                    csv_cell(row.label),
                    value,
                    *("" if fields[name] is None else fields[name] for name in ROLLUP_FIELDS[1:]),
                )
            )
        return buffer.getvalue()
    if not rows:
        return empty + "\n"
    cells = [
        (
            shown(row.label),
            *(
                f"{n:,}"
                for n in (
                    row.consumers,
                    row.active,
                    row.stale,
                    row.expired,
                    row.stuck,
                    row.groups,
                    row.leases,
                    row.leases_expired,
                )
            ),
            "drained" if row.drained else "",
        )
        for row in rows
    ]
    columns = _columns(field)
    # DRAINING and CAPACITY (protocol version 2) only when some value has them.
    more: list[tuple[Column, list[str]]] = []
    if any(row.draining for row in rows):
        more.append((Column("DRAINING", right=True), [f"{row.draining:,}" for row in rows]))
    if any(row.capacity is not None for row in rows):
        more.append(
            (
                Column("CAPACITY", right=True),
                ["" if row.capacity is None else f"{row.capacity:,}" for row in rows],
            )
        )
    if more:
        columns = (*columns[:-1], *(column for column, _ in more), columns[-1])
        cells = [
            (*cell[:-1], *(values[i] for _, values in more), cell[-1])
            for i, cell in enumerate(cells)
        ]
    return text_table(columns, cells, styler, width)


__all__ = ["ROLLUP_FIELDS", "render_rollup"]
