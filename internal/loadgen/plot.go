// This file holds PlotTTFTCDF: an SVG of each run's time-to-first-token distribution.

package loadgen

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Plot geometry: an 800×500 canvas, the plot area inside the margins.
const (
	plotW, plotH                       = 800, 500
	marginL, marginR, marginT, marginB = 70, 24, 44, 56
	plotLeft, plotRight                = marginL, plotW - marginR
	plotTop, plotBottom                = marginT, plotH - marginB
	legendRow, legendPad, legendCharW  = 18, 8, 7
	maxPointsPerSeries                 = 4000
)

// palette is Okabe and Ito's colour-blind-safe set, without its yellow,
// which vanishes on white.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"}

// PlotTTFTCDF writes an SVG of the empirical CDF of each series' TTFT
// samples (ms), one line per series in name order, with axes, ticks,
// labels and a legend giving each series' sample count. A series without
// samples appears in the legend only. Samples must be finite and
// non-negative.
func PlotTTFTCDF(w io.Writer, series map[string][]float64) error {
	names := slices.Sorted(maps.Keys(series))
	sorted := make(map[string][]float64, len(series))
	xmax := 0.0
	for _, name := range names {
		s := slices.Clone(series[name])
		for i, v := range s {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("loadgen: plot series %q: sample %d is %v, want a finite TTFT ≥ 0", name, i, v)
			}
		}
		slices.Sort(s)
		sorted[name] = s
		if len(s) > 0 {
			xmax = max(xmax, s[len(s)-1])
		}
	}
	step := niceStep(xmax, 8)
	xmax = math.Max(step, math.Ceil(xmax/step)*step)

	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", plotW, plotH, plotW, plotH)
	p(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", plotW, plotH)
	p(`<text class="title" x="%d" y="26" text-anchor="middle" font-size="16" font-weight="bold">Time to first token, cumulative distribution</text>`+"\n", (plotLeft+plotRight)/2)

	x := func(v float64) float64 { return plotLeft + v/xmax*(plotRight-plotLeft) }
	y := func(f float64) float64 { return plotBottom - f*(plotBottom-plotTop) }
	decimals := max(0, -int(math.Floor(math.Log10(step))))

	p(`<g class="grid" stroke="#e6e6e6" stroke-width="1">` + "\n")
	for v := step; v <= xmax*(1+1e-9); v += step {
		p(`<line x1="%s" y1="%d" x2="%s" y2="%d"/>`+"\n", num(x(v)), plotTop, num(x(v)), plotBottom)
	}
	for f := 0.2; f <= 1+1e-9; f += 0.2 {
		p(`<line x1="%d" y1="%s" x2="%d" y2="%s"/>`+"\n", plotLeft, num(y(f)), plotRight, num(y(f)))
	}
	p("</g>\n")

	p(`<g class="axes" stroke="#333333" stroke-width="1">` + "\n")
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", plotLeft, plotBottom, plotRight, plotBottom)
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", plotLeft, plotTop, plotLeft, plotBottom)
	p("</g>\n")

	p(`<g class="xticks" text-anchor="middle" fill="#333333">` + "\n")
	for i := 0; ; i++ {
		v := float64(i) * step
		if v > xmax*(1+1e-9) {
			break
		}
		p(`<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#333333"/>`, num(x(v)), plotBottom, num(x(v)), plotBottom+5)
		p(`<text x="%s" y="%d">%s</text>`+"\n", num(x(v)), plotBottom+19, strconv.FormatFloat(v, 'f', decimals, 64))
	}
	p("</g>\n")
	p(`<g class="yticks" text-anchor="end" fill="#333333">` + "\n")
	for i := 0; i <= 5; i++ {
		f := float64(i) / 5
		p(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#333333"/>`, plotLeft-5, num(y(f)), plotLeft, num(y(f)))
		p(`<text x="%d" y="%s">%s</text>`+"\n", plotLeft-8, num(y(f)+4), strconv.FormatFloat(f, 'f', 1, 64))
	}
	p("</g>\n")
	p(`<text class="xlabel" x="%d" y="%d" text-anchor="middle">TTFT (ms)</text>`+"\n", (plotLeft+plotRight)/2, plotH-14)
	p(`<text class="ylabel" x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">fraction of requests</text>`+"\n",
		18, (plotTop+plotBottom)/2, 18, (plotTop+plotBottom)/2)

	for i, name := range names {
		s := sorted[name]
		if len(s) == 0 {
			continue
		}
		p(`<path class="cdf" data-series="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" d="%s"/>`+"\n",
			escape(name), palette[i%len(palette)], cdfPath(s, x, y))
	}

	// The legend sits bottom right, where CDFs rarely pass: by the time a
	// curve is far right it is near the top.
	labels := make([]string, len(names))
	longest := 0
	for i, name := range names {
		if n := len(sorted[name]); n > 0 {
			labels[i] = fmt.Sprintf("%s (n=%d)", name, n)
		} else {
			labels[i] = name + " (no data)"
		}
		longest = max(longest, len([]rune(labels[i])))
	}
	lw := 2*legendPad + 28 + longest*legendCharW
	lh := 2*legendPad + len(names)*legendRow
	lx, ly := plotRight-lw-10, plotBottom-lh-10
	p(`<g class="legend">` + "\n")
	p(`<rect x="%d" y="%d" width="%d" height="%d" fill="#ffffff" fill-opacity="0.9" stroke="#999999"/>`+"\n", lx, ly, lw, lh)
	for i := range names {
		ry := ly + legendPad + i*legendRow + legendRow/2
		dash := ""
		if len(sorted[names[i]]) == 0 {
			dash = ` stroke-dasharray="3 3"`
		}
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`, lx+legendPad, ry, lx+legendPad+20, ry, palette[i%len(palette)], dash)
		p(`<text x="%d" y="%d">%s</text>`+"\n", lx+legendPad+28, ry+4, escape(labels[i]))
	}
	p("</g>\n</svg>\n")
	return bw.Flush()
}

// cdfPath draws the empirical CDF of ascending samples as a staircase:
// at each sample the curve rises by 1/n. Points are rounded to a tenth of
// a pixel and repeats dropped, which bounds the path by the canvas rather
// than by the number of samples.
func cdfPath(s []float64, x func(float64) float64, y func(float64) float64) string {
	var b strings.Builder
	n := float64(len(s))
	last := ""
	point := func(px, py float64) {
		pt := num(px) + " " + num(py)
		if pt == last {
			return
		}
		if last == "" {
			b.WriteString("M" + pt)
		} else {
			b.WriteString(" L" + pt)
		}
		last = pt
	}
	point(x(s[0]), y(0))
	for i := 0; i < len(s); {
		j := i + 1
		for j < len(s) && s[j] == s[i] {
			j++
		}
		point(x(s[i]), y(float64(i)/n))
		point(x(s[i]), y(float64(j)/n))
		i = j
	}
	return b.String()
}

// niceStep returns a tick spacing of 1, 2 or 5 times a power of ten that
// cuts [0, max] into at most about target intervals.
func niceStep(maxV float64, target int) float64 {
	if maxV <= 0 {
		return 1
	}
	raw := maxV / float64(target)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}
