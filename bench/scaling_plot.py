#!/usr/bin/env python3
"""An SVG of step time and scaling efficiency against hosts, measured and
predicted, from bench/cluster_scaling.sh's JSON, for one layout family at each
link rate.   bench/scaling_plot.py OUT.json FAMILY PLOT.svg"""
import json
import sys

W, H, PAD = 760, 300, 50
COLORS = {0: "#444444", 1000: "#1f77b4", 100: "#d62728"}


def panel(x0, title, ylabel, series, ymax):
    """series: [(label, color, dashed, [(hosts, value)])]; hosts on a log2 axis 1, 2, 4."""
    w, h = W / 2 - PAD - 20, H - 2 * PAD
    xs = {1: 0.0, 2: 0.5, 4: 1.0}
    px = lambda hst: x0 + PAD + xs[hst] * w
    py = lambda v: PAD + h - (v / ymax) * h
    out = ['<text x="%g" y="20" font-size="14" text-anchor="middle">%s</text>' % (x0 + PAD + w / 2, title),
           '<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>' % (px(1), py(0), px(4), py(0)),
           '<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>' % (px(1), py(0), px(1), py(ymax)),
           '<text x="%g" y="%g" font-size="11" transform="rotate(-90 %g %g)" text-anchor="middle">%s</text>' % (
               x0 + 14, PAD + h / 2, x0 + 14, PAD + h / 2, ylabel)]
    for hst in xs:
        out.append('<text x="%g" y="%g" font-size="11" text-anchor="middle">%d host%s</text>' % (
            px(hst), py(0) + 16, hst, "s" if hst > 1 else ""))
    for k in range(5):
        v = ymax * k / 4
        out.append('<text x="%g" y="%g" font-size="10" text-anchor="end">%.2f</text>' % (px(1) - 4, py(v) + 3, v))
    for i, (label, color, dashed, pts) in enumerate(series):
        pts = sorted(pts)
        d = " ".join("%g,%g" % (px(a), py(b)) for a, b in pts)
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>' % (
            d, color, ' stroke-dasharray="5,4"' if dashed else ""))
        for a, b in pts:
            out.append('<circle cx="%g" cy="%g" r="3" fill="%s"/>' % (px(a), py(b), color))
    return out


def main():
    data = json.load(open(sys.argv[1]))
    fam, path = sys.argv[2], sys.argv[3]
    rows = [r for r in data["rows"] if r["layout"] == fam]
    one = [r for r in rows if r["hosts"] == 1]
    rates = sorted({r["rate_mbit"] for r in rows if r["hosts"] > 1}, reverse=True)
    step, eff = [], []
    for rate in rates:
        rs = one + [r for r in rows if r["hosts"] > 1 and r["rate_mbit"] == rate]
        name = "%d Mbit/s" % rate if rate else "unlimited"
        c = COLORS.get(rate, "#2ca02c")
        step.append(("measured " + name, c, False, [(r["hosts"], r["measured_step_s"]) for r in rs]))
        step.append(("predicted " + name, c, True, [(r["hosts"], r["predicted_step_s"]) for r in rs]))
        base = one[0]
        eff.append(("", c, False, [(r["hosts"], r["tokens_per_s"] / r["ranks"] / (base["tokens_per_s"] / base["ranks"]))
                                   for r in rs]))
        # Predicted tokens/s follow the predicted step: tokens per step are the same for both.
        rate_of = lambda r, step_s: r["tokens_per_s"] * r["measured_step_s"] / step_s / r["ranks"]
        eff.append(("", c, True, [(r["hosts"], rate_of(r, r["predicted_step_s"]) /
                                   rate_of(base, base["predicted_step_s"])) for r in rs]))
    ymax = max(v for s in step for _, v in s[3]) * 1.1
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, H + 40),
           '<rect width="100%" height="100%" fill="white"/>']
    svg += panel(0, "%s: step time (s)" % fam, "seconds per step", step, ymax)
    svg += panel(W / 2, "%s: scaling efficiency" % fam, "tokens/s per rank vs 1 host", eff, 1.1)
    y = H + 10
    for i, (label, c, dashed, _) in enumerate(step):
        x = 20 + i * 165
        svg.append('<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"%s/>' % (
            x, y, x + 20, y, c, ' stroke-dasharray="5,4"' if dashed else ""))
        svg.append('<text x="%g" y="%g" font-size="10">%s</text>' % (x + 24, y + 4, label))
    svg.append("</svg>")
    open(path, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
