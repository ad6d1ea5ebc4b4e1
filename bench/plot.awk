# Tiny SVG plots for the benchmark results (see docs/decisions.md: why not plotters or gnuplot).
#
#   awk -f plot.awk -v mode=strip -v title=T -v ylabel=U  < "GROUP VALUE" lines  > out.svg
#       every value as a dot in its group's column (one column per alternative), the median as
#       a bar and, from 4 values up, the box from the lower to the upper quartile
#   awk -f plot.awk -v mode=lines -v title=T -v xlabel=X -v ylabel=Y < "SERIES X Y" lines > out.svg
#       one poly-line per series (a time line)
function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); return s }
function nice(v,   e, f) { if (v <= 0) return 1; e = 10 ^ int(log(v) / log(10)); f = v / e
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * e }
function px(x) { return L + (x - x0) / (x1 - x0) * (W - L - R) }
function py(y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B) }
# q(k, p): the p-quantile of group k's values (sorted in place; linear between order statistics).
function q(k, p,   i, j, t, n, h) { n = cnt[k]
  for (i = 2; i <= n; i++) { t = ys[k, i]; for (j = i - 1; j >= 1 && ys[k, j] > t; j--) ys[k, j + 1] = ys[k, j]; ys[k, j + 1] = t }
  h = (n - 1) * p + 1; i = int(h); return (i >= n) ? ys[k, n] : ys[k, i] + (h - i) * (ys[k, i + 1] - ys[k, i]) }
BEGIN { W = 640; H = 360; L = 70; R = 20; T = 40; B = 50
  split("#1f77b4 #d62728 #2ca02c #ff7f0e #9467bd #8c564b #e377c2 #7f7f7f", col, " ") }
NF >= 2 {
  g = $1
  if (!(g in gi)) { gi[g] = ++ng; gname[ng] = g }
  k = gi[g]
  if (mode == "lines") { xs[k, ++cnt[k]] = $2; ys[k, cnt[k]] = $3; v = $3
    if (!seenx || $2 < xmin) xmin = $2; if (!seenx || $2 > xmax) xmax = $2; seenx = 1 }
  else { ys[k, ++cnt[k]] = $2; v = $2; sum[k] += $2 }
  if (!seen || v < ymin) ymin = v; if (!seen || v > ymax) ymax = v; seen = 1
}
END {
  if (!seen) { ymin = 0; ymax = 1 }
  y0 = ymin < 0 ? ymin : 0
  if (ymax <= y0) ymax = y0 + 1
  step = nice((ymax - y0) / 5); y0 = int(y0 / step) * step; if (y0 > ymin) y0 -= step
  y1 = y0 + step * (int((ymax - y0) / step) + 1)
  if (mode == "lines") { x0 = xmin; x1 = (xmax > xmin ? xmax : xmin + 1) } else { x0 = 0; x1 = ng; if (ng * 150 + L + R > W) W = ng * 150 + L + R }
  printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H
  printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
  printf "<text x=\"%d\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">%s</text>\n", W / 2, esc(title)
  for (y = y0; y <= y1 + step / 2; y += step) {
    printf "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", L, W - R, py(y), py(y)
    printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6, py(y) + 4, y }
  printf "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"black\"/>", L, L, T, H - B
  printf "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L, W - R, H - B, H - B
  printf "<text transform=\"translate(16,%d) rotate(-90)\" text-anchor=\"middle\">%s</text>\n", (H - B + T) / 2, esc(ylabel)
  if (mode == "lines") {
    xstep = nice((x1 - x0) / 6)
    for (x = int(x0 / xstep) * xstep; x <= x1; x += xstep) if (x >= x0)
      printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", px(x), H - B + 16, x
    printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", (W + L) / 2, H - 10, esc(xlabel)
    for (k = 1; k <= ng; k++) {
      printf "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", col[(k - 1) % 8 + 1]
      for (i = 1; i <= cnt[k]; i++) printf "%.1f,%.1f ", px(xs[k, i]), py(ys[k, i])
      printf "\"/>\n"
      printf "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n", L + 10, T + 4 + (k - 1) * 16, col[(k - 1) % 8 + 1], L + 24, T + 13 + (k - 1) * 16, esc(gname[k])
    }
  } else {
    for (k = 1; k <= ng; k++) {
      cx = px(k - 0.5); c = col[(k - 1) % 8 + 1]
      for (i = 1; i <= cnt[k]; i++) {
        jit = ((i * 37) % 11 - 5) * 4
        printf "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\" fill-opacity=\"0.6\"/>", cx + jit, py(ys[k, i]), c }
      m = q(k, 0.5)
      if (cnt[k] >= 4) printf "\n<rect x=\"%.1f\" y=\"%.1f\" width=\"60\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>", cx - 30, py(q(k, 0.75)), py(q(k, 0.25)) - py(q(k, 0.75))
      printf "\n<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"black\" stroke-width=\"2\"/>", cx - 30, cx + 30, py(m), py(m)
      printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>", cx, H - B + 16, esc(gname[k])
      printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">n=%d, median %.3g</text>\n", cx, H - B + 30, cnt[k], m
    }
  }
  print "</svg>"
}
