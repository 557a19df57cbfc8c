"""The tuning plan as a terminal table (`tune`, and `show`/`report` of a tune bundle)."""

from __future__ import annotations

from rich.table import Table as RichTable

APPLIES = {"runtime": "runtime change", "boot": "boot only (advice)", "no": "not possible"}


def plan_table(rows: list[dict]) -> RichTable | None:
    """One line per candidate: for which CPU, how it applies, its share of the
    CPU's lost time, and the evidence with what to do."""
    if not rows:
        return None
    table = RichTable(title="Tuning plan (dry run: nothing was changed)", title_justify="left")
    table.add_column("CPU", justify="right")
    table.add_column("action")
    table.add_column("applies")
    table.add_column("share %", justify="right")
    table.add_column("evidence and advice", overflow="fold")
    for row in rows:
        share = row.get("share_pct")
        table.add_row("targets" if row["cpu"] is None else str(row["cpu"]), row["action"],
                      APPLIES.get(row["applies"], row["applies"]),
                      "-" if share is None else f"{share:.1f}", row["evidence"])
    return table
