"""The tuning plan as a terminal table (`tune`, and `show`/`report` of a tune bundle)."""

from __future__ import annotations

from rich.table import Table as RichTable

APPLIES = {"runtime": "runtime change", "boot": "boot only (advice)", "no": "not possible"}
LISTED_SHARE_PCT = 0.1  # candidates with a smaller share of their CPU's lost time are counted


def plan_table(rows: list[dict]) -> RichTable | None:
    """One line per candidate: for which CPU, how it applies, its share of the
    CPU's lost time, and the evidence with what to do. Candidates under
    LISTED_SHARE_PCT are counted in the caption (the bundle keeps them all);
    those without a share (system settings, boot advice) are always listed."""
    if not rows:
        return None
    shown = [r for r in rows if r.get("share_pct") is None or r["share_pct"] >= LISTED_SHARE_PCT]
    hidden = len(rows) - len(shown)
    table = RichTable(title="Tuning plan (dry run: nothing was changed)", title_justify="left",
                      caption=(f"{hidden} more candidate{'s' if hidden != 1 else ''} below "
                               f"{LISTED_SHARE_PCT}% of a CPU's lost time, in the bundle's plan")
                      if hidden else None, caption_justify="left")
    table.add_column("CPU", justify="right")
    table.add_column("action")
    table.add_column("applies")
    table.add_column("share %", justify="right")
    table.add_column("evidence and advice", overflow="fold")
    for row in shown:
        share = row.get("share_pct")
        table.add_row("targets" if row["cpu"] is None else str(row["cpu"]), row["action"],
                      APPLIES.get(row["applies"], row["applies"]),
                      "-" if share is None else f"{share:.1f}", row["evidence"])
    return table
