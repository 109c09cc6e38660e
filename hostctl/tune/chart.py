"""The objective per trial as a PNG, through matplotlib (an optional extra: `pip install
'hostctl[charts]'`). Imported only here and only when a chart is drawn; without it the chart
is skipped and the result says why. Drawing only: the PNG is written with tune's other results
(tune/runner.py, through the executor's files part)."""

from __future__ import annotations

import io


def draw(doc: dict) -> tuple[bytes | None, str | None]:
    """(the PNG, None) when drawn, (None, why) when not."""
    trials = doc.get("trials") or []
    if not trials:
        return None, "no trials"
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a display
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "matplotlib is not installed (pip install 'hostctl[charts]')"
    win = (doc.get("winner") or {}).get("trial")
    names, values, colours = [], [], []
    for t in trials:
        knobs = "\n".join(f"{k.lstrip('-')}={v}" for k, v in t["knobs"].items())
        names.append(f"{t['id']}\n{knobs}")
        ok = isinstance(t.get("objective"), (int, float))
        values.append(t["objective"] if ok else 0.0)
        colours.append("tab:green" if t["id"] == win else ("tab:blue" if t.get("valid") else
                                                            ("tab:gray" if ok else "tab:red")))
    fig, ax = plt.subplots(figsize=(max(6.0, 2.4 * len(trials)), 5.0))
    bars = ax.bar(range(len(trials)), values, color=colours)
    for bar, t in zip(bars, trials):
        label = (f"{t['objective']:.1f}" if isinstance(t.get("objective"), (int, float))
                 else (t.get("cause") or {}).get("id", t.get("status", "")))
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(range(len(trials)))
    ax.set_xticklabels(names, fontsize=7)
    ax.set_ylabel(doc.get("objective", "objective"))
    ax.set_title(f"hostctl tune {doc['recipe']['id']}\ngreen: winner, blue: meets the constraints, "
                 "grey: does not, red: failed to start", fontsize=9)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return png.getvalue(), None
