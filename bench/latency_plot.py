#!/usr/bin/env python3
"""An SVG of step time against the one-way delay added between 2 hosts, for
DP, PP and TP across the hosts: measured (dots) and predicted (lines), from
`bench/cluster_scaling.sh --latency --json OUT`.
    bench/latency_plot.py OUT.json PLOT.svg"""
import json
import sys

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 720, 360, 70, 190, 40, 50
NAMES = {"dp": "DP across hosts", "pp": "PP across hosts", "tpx": "TP across hosts"}
COLORS = {"dp": "#1f77b4", "pp": "#2ca02c", "tpx": "#d62728"}


def main():
    data = json.load(open(sys.argv[1]))
    rows = data["rows"]
    delays = sorted({r["delay_ms"] for r in rows} | {p["delay_ms"] for p in data.get("predicted_only", [])})
    xmax = max(delays) or 1.0
    ymax = max(max(r["measured_step_s"], r["predicted_step_s"]) for r in rows) * 1.1
    w, h = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    px = lambda d: PAD_L + d / xmax * w
    py = lambda v: PAD_T + h - v / ymax * h
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, H),
           '<text x="%g" y="22" font-size="14" text-anchor="middle">Step time against the one-way delay '
           'between 2 hosts</text>' % (PAD_L + w / 2),
           '<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>' % (px(0), py(0), px(xmax), py(0)),
           '<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>' % (px(0), py(0), px(0), py(ymax)),
           '<text x="%g" y="%g" font-size="12" text-anchor="middle">added one-way delay (ms)</text>' % (
               PAD_L + w / 2, H - 10),
           '<text x="16" y="%g" font-size="12" transform="rotate(-90 16 %g)" text-anchor="middle">step time (s)'
           '</text>' % (PAD_T + h / 2, PAD_T + h / 2)]
    for d in delays:
        out.append('<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>' % (px(d), py(0), px(d), py(0) + 4))
        out.append('<text x="%g" y="%g" font-size="11" text-anchor="middle">%g</text>' % (px(d), py(0) + 17, d))
    for k in range(6):
        v = ymax * k / 5
        out.append('<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#ddd"/>' % (px(0), py(v), px(xmax), py(v)))
        out.append('<text x="%g" y="%g" font-size="11" text-anchor="end">%.2f</text>' % (px(0) - 5, py(v) + 4, v))
    legend_y = PAD_T + 10
    for fam in ("dp", "pp", "tpx"):
        measured = sorted((r["delay_ms"], r["measured_step_s"]) for r in rows if r["layout"] == fam)
        if not measured:
            continue
        predicted = sorted([(r["delay_ms"], r["predicted_step_s"]) for r in rows if r["layout"] == fam] +
                           [(p["delay_ms"], p["predicted_step_s"]) for p in data.get("predicted_only", [])
                            if p["layout"] == fam])
        color = COLORS[fam]
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" stroke-dasharray="6 4" points="%s"/>' % (
            color, " ".join("%g,%g" % (px(d), py(v)) for d, v in predicted)))
        for d, v in measured:
            out.append('<circle cx="%g" cy="%g" r="4" fill="%s"/>' % (px(d), py(v), color))
        lx = W - PAD_R + 15
        out.append('<circle cx="%g" cy="%g" r="4" fill="%s"/>' % (lx, legend_y, color))
        out.append('<text x="%g" y="%g" font-size="12">%s</text>' % (lx + 10, legend_y + 4, NAMES[fam]))
        legend_y += 22
    lx = W - PAD_R + 15
    out.append('<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black" stroke-dasharray="6 4"/>' % (
        lx - 6, legend_y, lx + 6, legend_y))
    out.append('<text x="%g" y="%g" font-size="12">predicted</text>' % (lx + 10, legend_y + 4))
    out.append('<circle cx="%g" cy="%g" r="4" fill="black"/>' % (lx, legend_y + 22))
    out.append('<text x="%g" y="%g" font-size="12">measured</text>' % (lx + 10, legend_y + 26))
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


main()
