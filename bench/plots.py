"""Figures: one timeline per run (a row per node) and makespan against fleet size."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display on a server
import matplotlib.pyplot as plt  # noqa: E402

BOOT_COLOURS = {"cdrom": "tab:green", "disk": "tab:red"}


def timeline(result: dict, path: Path) -> Path:
    """Insert, media ready, reset and boot of every node, boots coloured by device."""
    nodes = result["nodes"]
    height = max(2.5, min(0.12 * len(nodes) + 1.5, 30))
    fig, ax = plt.subplots(figsize=(10, height))
    for row, node in enumerate(nodes):
        insert, ready = node["insert_requested"], node["media_attached"]
        if insert is not None and ready is not None:
            ax.plot([insert, ready], [row, row], color="tab:blue", lw=2, alpha=0.6)
        if insert is not None:
            ax.plot(insert, row, "|", color="tab:blue", ms=8)
        if node["reset_requested"] is not None:
            ax.plot(node["reset_requested"], row, "x", color="black", ms=5)
        boot = node["boot_time"] if node["boot_time"] is not None else node["power_on_seen"]
        if boot is not None:
            colour = BOOT_COLOURS.get(node["boot_device"], "tab:gray")
            ax.plot(boot, row, "o", color=colour, ms=5)
    ax.set_xlabel("seconds since the first Ironic call")
    ax.set_ylabel("node")
    if len(nodes) <= 30:  # names stay readable up to about this many rows
        ax.set_yticks(range(len(nodes)), [str(n["node"])[:24] for n in nodes], fontsize=7)
    else:
        ax.set_yticks([])
    ax.set_title(
        f"{result['mode']}: N={result['n']}, T={result['import_seconds']:g} s, "
        f"workers={result['workers']} (bar: insert -> media ready, x: Reset, "
        "o: boot, green cdrom / red disk / grey no record)",
        fontsize=8,
    )
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def makespan_chart(results: list[dict], path: Path) -> Path:
    """Makespan (all nodes booted their ISO; media-ready time where no node did) against N."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode in sorted({r["mode"] for r in results}):
        rows = sorted((r for r in results if r["mode"] == mode), key=lambda r: r["n"])
        xs, ys = [], []
        for r in rows:
            value = (
                r["makespan_seconds"]
                or r["media_makespan_seconds"]
                or r["media_makespan_projected_seconds"]
            )
            if value is not None:
                xs.append(r["n"])
                ys.append(value)
        if xs:
            ax.plot(xs, ys, "o-", label=mode)
    imports = sorted({r["import_seconds"] for r in results})
    for t in imports:
        ax.axhline(1.3 * t, color="gray", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes provisioned at once (N)")
    ax.set_ylabel("makespan (s)")
    ax.set_title("Makespan vs N (dotted: 1.3 x T; sequential past its deadline is projected)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
