#!/usr/bin/env python3
"""Workload 1, rows 3 and 13 against Barracuda's log ring size.

Reads the runs of sweep.sh in this directory (b<MiB>-<round>.json: Barracuda
with `--barracuda-w1-log-mib <MiB>`; ref-<round>.json: fjall and RocksDB once
per round), prints the medians, and draws ring-tradeoff.svg: each row's
median as a multiple of the best engine's median (batch writes: fjall;
uncompacted size: RocksDB), with the issue's 2x line. Standard library only.
"""

import json
import math
import statistics
from pathlib import Path

HERE = Path(__file__).parent
RINGS = [8, 12, 16, 24, 32, 48, 64, 96, 128]
ROUNDS = [1, 2, 3]


def rows(path):
    data = json.loads(path.read_text())
    return {e["engine"]: {r["row"]: r["value"] for r in e["rows"]} for e in data}


refs = [rows(HERE / f"ref-{r}.json") for r in ROUNDS]
fjall_batch = statistics.median(x["fjall"]["batch writes"] for x in refs)
rocks_size = statistics.median(x["rocksdb"]["uncompacted size"] for x in refs)
points = []
for ring in RINGS:
    runs = [rows(HERE / f"b{ring}-{r}.json")["barracuda"] for r in ROUNDS]
    batch = statistics.median(x["batch writes"] for x in runs)
    size = statistics.median(x["uncompacted size"] for x in runs)
    points.append((ring, batch / fjall_batch, size / rocks_size, batch, size))
print(f"fjall batch writes {fjall_batch:.0f} ms, RocksDB uncompacted {rocks_size / 2**20:.2f} MiB")
print("| log ring | uncompacted size | x RocksDB | batch writes | x fjall |")
print("|---:|---:|---:|---:|---:|")
for ring, batch_x, size_x, batch, size in points:
    print(f"| {ring} MiB | {size / 2**20:.2f} MiB | {size_x:.2f}x | {batch:.0f} ms | {batch_x:.2f}x |")

# The chart: x = ring size (log scale), y = multiple of the best engine.
W, H, L, R, T, B = 640, 400, 60, 150, 40, 50
y_max = 5.0


def px(ring):
    lo, hi = math.log2(RINGS[0]), math.log2(RINGS[-1])
    return L + (math.log2(ring) - lo) / (hi - lo) * (W - L - R)


def py(value):
    return T + (1 - min(value, y_max) / y_max) * (H - T - B)


svg = [
    f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
    f'<rect width="{W}" height="{H}" fill="white"/>',
    f'<text x="{W / 2 - 40}" y="20" text-anchor="middle" font-size="14">Workload 1: Barracuda\'s log ring, rows 3 and 13</text>',
]
for tick in range(0, int(y_max) + 1):
    y = py(tick)
    svg.append(f'<line x1="{L}" y1="{y}" x2="{W - R}" y2="{y}" stroke="#ddd"/>')
    svg.append(f'<text x="{L - 8}" y="{y + 4}" text-anchor="end">{tick}x</text>')
for ring in RINGS:
    x = px(ring)
    svg.append(f'<line x1="{x}" y1="{H - B}" x2="{x}" y2="{H - B + 5}" stroke="black"/>')
    svg.append(f'<text x="{x}" y="{H - B + 18}" text-anchor="middle">{ring}</text>')
svg.append(f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">log ring (MiB, log scale)</text>')
svg.append(f'<text x="15" y="{(T + H - B) / 2}" transform="rotate(-90 15 {(T + H - B) / 2})" text-anchor="middle">multiple of the best engine</text>')
svg.append(f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>')
svg.append(f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>')
y2 = py(2.0)
svg.append(f'<line x1="{L}" y1="{y2}" x2="{W - R}" y2="{y2}" stroke="#c00" stroke-dasharray="6 4"/>')
svg.append(f'<text x="{W - R + 6}" y="{y2 + 4}" fill="#c00">2x (the target)</text>')
for index, (label, colour) in enumerate(
    [("batch writes / fjall", "#1f77b4"), ("uncompacted size / RocksDB", "#2ca02c")]
):
    values = [(p[0], p[1 + index]) for p in points]
    path = " ".join(f"{px(r):.1f},{py(v):.1f}" for r, v in values)
    svg.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
    for r, v in values:
        svg.append(f'<circle cx="{px(r):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}"/>')
    last_ring, last_value = values[-1]
    svg.append(
        f'<text x="{W - R + 6}" y="{py(last_value) + 4 + (12 if index else -6)}" fill="{colour}">{label}</text>'
    )
svg.append("</svg>")
(HERE / "ring-tradeoff.svg").write_text("\n".join(svg) + "\n")
print(f"wrote {HERE / 'ring-tradeoff.svg'}")
