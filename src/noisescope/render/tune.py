"""The tuning plan and the trials of --measure as terminal tables (`tune`, and
`show`/`report` of a tune bundle)."""

from __future__ import annotations

from rich.table import Table as RichTable

from ..tune.plan import SMALL_SHARE_PCT as LISTED_SHARE_PCT
from ..units import format_duration

APPLIES = {"runtime": "runtime change", "boot": "boot only (advice)", "no": "not possible"}


def plan_table(rows: list[dict]) -> RichTable | None:
    """One line per candidate: for which CPU, how it applies, its share of the
    CPU's lost time, and the evidence with what to do. Candidates under
    LISTED_SHARE_PCT are counted in the caption (the bundle keeps them all);
    those without a share (system settings, boot advice) are always listed."""
    if not rows:
        return None
    shown = [r for r in rows if r.get("share_pct") is None or r["share_pct"] >= LISTED_SHARE_PCT]
    hidden = len(rows) - len(shown)
    table = RichTable(title="Tuning plan", title_justify="left",
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


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ns":
        return format_duration(value)
    return f"{value:.3f}" if unit == "%" else f"{value:,.1f}"


def _change(row: dict) -> str:
    """The change with its interval: '-98.1% (-99.0, -97.2)'."""
    if row.get("change") is None:
        return "-"
    unit = row["change_unit"]
    if unit in ("%", "pp"):
        text = f"{row['change']:+.1f}{unit}"
        interval = (f" ({row['ci_low']:+.1f}, {row['ci_high']:+.1f})"
                    if row.get("ci_low") is not None else "")
    else:
        text = _value(row["change"], unit)
        interval = (f" ({_value(row['ci_low'], unit)}, {_value(row['ci_high'], unit)})"
                    if row.get("ci_low") is not None else "")
    return text + interval


def _tested(row: dict | None) -> str:
    """before -> after (medians), the change with its interval, and its q-value."""
    if row is None:
        return "-"
    unit = row["unit"]
    said = f"{_value(row['before_median'], unit)} -> {_value(row['after_median'], unit)}"
    if row.get("p_value") is None:
        return f"{said}: {row['verdict']}"
    said += f": {_change(row)} q={row['q_value']:.2g}"
    if not row["significant"]:
        return said + " not significant"
    return said + ("" if row["pairs_agree"] else ", but the pairs of rounds disagree")


KEPT = {True: "kept", False: "put back", None: "put back"}


def trials_table(trials: list[dict]) -> RichTable | None:
    """One line per trial and CPU: noise % and the targeted cause's share (its
    own lost time, % of the CPU) before -> after with the change, its interval
    and q-value, the verdict, and whether the change was kept (--apply)."""
    if not trials:
        return None
    table = RichTable(title="Trials (each change measured in interleaved rounds)",
                      title_justify="left", caption="before -> after: medians of the rounds' "
                      "slices; change: Hodges-Lehmann estimate (its interval in parentheses); q: "
                      "Mann-Whitney p adjusted for the trial's comparisons (Benjamini-Hochberg); "
                      "targeted: the cause's own lost time, % of the CPU", caption_justify="left")
    for column in ("action", "CPU", "noise %", "targeted %", "verdict", "state"):
        table.add_column(column, justify="right" if column == "CPU" else "left",
                         overflow="fold")
    by_trial: dict[tuple[str, int], dict[str, dict]] = {}
    for row in (r for trial in trials for r in trial.get("comparison", [])):
        by_trial.setdefault((row["trial"], row["cpu"]), {})[row["metric"]] = row
    for trial in trials:
        state = KEPT[trial.get("kept")] if trial["status"] == "measured" else trial["status"]
        cpus = [c for c in trial["cpus"] if (trial["trial"], c) in by_trial] or [None]
        for cpu in cpus:
            metrics = by_trial.get((trial["trial"], cpu), {})
            worse = [r["title"] for r in metrics.values() if r["verdict"] == "worse"
                     and r["pairs_agree"]]
            said = trial["verdict"] or "-"
            table.add_row(trial["trial"], "-" if cpu is None else str(cpu),
                          _tested(metrics.get("noise_pct")), _tested(metrics.get("targeted_pct")),
                          f"{said} ({', '.join(worse)} worse)" if worse else said, state)
    return table


def persistent_table(files: list[dict]) -> RichTable | None:
    """The snippets in the bundle's persistent/ directory (tune --apply): what
    makes the kept changes last across boots, to install by hand."""
    if not files:
        return None
    t = RichTable(title="persistent/ (install these to keep the changes across boots)",
                  title_justify="left", box=None, show_header=False)
    t.add_column("file")
    for row in files:
        t.add_row(row["file"])
    return t
