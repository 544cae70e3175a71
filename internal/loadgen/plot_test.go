package loadgen

import (
	"bytes"
	"encoding/xml"
	"kvrouter/internal/golden"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type svgDoc struct {
	XMLName xml.Name  `xml:"svg"`
	Width   string    `xml:"width,attr"`
	Height  string    `xml:"height,attr"`
	ViewBox string    `xml:"viewBox,attr"`
	Paths   []svgPath `xml:"path"`
	Groups  []struct {
		Class string `xml:"class,attr"`
		Texts []struct {
			Text string `xml:",chardata"`
		} `xml:"text"`
		Lines []struct {
			Stroke string `xml:"stroke,attr"`
		} `xml:"line"`
	} `xml:"g"`
	Texts []struct {
		Class string `xml:"class,attr"`
		Text  string `xml:",chardata"`
	} `xml:"text"`
}

type svgPath struct {
	Class  string `xml:"class,attr"`
	Series string `xml:"data-series,attr"`
	Stroke string `xml:"stroke,attr"`
	D      string `xml:"d,attr"`
}

func parseSVG(t *testing.T, data []byte) svgDoc {
	t.Helper()
	// A full token walk first: Unmarshal alone skips what it does not map.
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		_, err := dec.Token()
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
	var doc svgDoc
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func (d svgDoc) group(class string) []string {
	for _, g := range d.Groups {
		if g.Class == class {
			var out []string
			for _, t := range g.Texts {
				out = append(out, t.Text)
			}
			return out
		}
	}
	return nil
}

// points parses "M x y L x y ..." into coordinate pairs.
func points(t *testing.T, d string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for i, cmd := range strings.Split(d, " L") {
		if i == 0 {
			cmd = strings.TrimPrefix(cmd, "M")
		}
		f := strings.Fields(cmd)
		if len(f) != 2 {
			t.Fatalf("bad path segment %q", cmd)
		}
		x, err1 := strconv.ParseFloat(f[0], 64)
		y, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad path segment %q", cmd)
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}

func TestPlotTTFTCDF(t *testing.T) {
	many := make([]float64, 20000)
	for i := range many {
		many[i] = float64(i%997) * 1.7
	}
	tests := []struct {
		name   string
		series map[string][]float64
		legend []string
		xticks []string // a subset that must appear
	}{{
		name: "five policies",
		series: map[string][]float64{
			"round_robin": {420, 180, 610, 95, 300}, "random": {400, 175, 650, 120},
			"least_loaded": {300, 150, 500}, "kv": {240, 60, 480, 61, 62}, "kv_hints": {168, 55, 300, 54},
		},
		legend: []string{"kv (n=5)", "kv_hints (n=4)", "least_loaded (n=3)", "random (n=4)", "round_robin (n=5)"},
		xticks: []string{"0", "100", "700"},
	}, {
		name:   "a series without data, names needing escapes",
		series: map[string][]float64{"a<b & \"c\"": {0.5, 0.25, 0.5}, "empty": nil},
		legend: []string{"a<b & \"c\" (n=3)", "empty (no data)"},
		xticks: []string{"0.0", "0.1", "0.5"},
	}, {
		name:   "all zero",
		series: map[string][]float64{"z": {0, 0}},
		legend: []string{"z (n=2)"},
		xticks: []string{"0", "1"},
	}, {
		name:   "nothing",
		series: map[string][]float64{},
		xticks: []string{"0", "1"},
	}, {
		name:   "many samples stay within the canvas's resolution",
		series: map[string][]float64{"big": many},
		legend: []string{"big (n=20000)"},
		xticks: []string{"0", "1500", "2000"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := PlotTTFTCDF(&buf, tt.series); err != nil {
				t.Fatal(err)
			}
			doc := parseSVG(t, buf.Bytes())
			if doc.Width != "800" || doc.Height != "500" || doc.ViewBox != "0 0 800 500" {
				t.Fatalf("canvas %s×%s %q", doc.Width, doc.Height, doc.ViewBox)
			}
			if got := doc.group("legend"); !slices.Equal(got, tt.legend) {
				t.Fatalf("legend %q, want %q", got, tt.legend)
			}
			xt := doc.group("xticks")
			for _, want := range tt.xticks {
				if !slices.Contains(xt, want) {
					t.Errorf("x ticks %v lack %s", xt, want)
				}
			}
			if yt := doc.group("yticks"); !slices.Equal(yt, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}) {
				t.Errorf("y ticks %v", yt)
			}
			var labels []string
			for _, tx := range doc.Texts {
				labels = append(labels, tx.Class)
			}
			if !slices.Equal(labels, []string{"title", "xlabel", "ylabel"}) {
				t.Errorf("labels %v", labels)
			}
			var withData []string
			for name, s := range tt.series {
				if len(s) > 0 {
					withData = append(withData, name)
				}
			}
			slices.Sort(withData)
			var drawn, colours []string
			for _, p := range doc.Paths {
				if p.Class != "cdf" {
					continue
				}
				drawn = append(drawn, p.Series)
				colours = append(colours, p.Stroke)
				checkCDF(t, p, len(tt.series[p.Series]))
			}
			if !slices.Equal(drawn, withData) {
				t.Fatalf("curves for %v, want %v", drawn, withData)
			}
			if len(slices.Compact(slices.Sorted(slices.Values(colours)))) != len(colours) {
				t.Fatalf("colours %v repeat", colours)
			}
			if buf.Len() > 400_000 {
				t.Fatalf("%d bytes of SVG", buf.Len())
			}
		})
	}
}

// checkCDF: a curve starts at the bottom, ends at the top, never goes left
// or down, and stays in the plot area.
func checkCDF(t *testing.T, p svgPath, n int) {
	t.Helper()
	pts := points(t, p.D)
	first, last := pts[0], pts[len(pts)-1]
	if first[1] != plotBottom || last[1] != plotTop {
		t.Fatalf("%s: runs from y=%v to y=%v, want %d to %d", p.Series, first[1], last[1], plotBottom, plotTop)
	}
	for i, pt := range pts {
		if pt[0] < plotLeft || pt[0] > plotRight || pt[1] < plotTop || pt[1] > plotBottom {
			t.Fatalf("%s: point %v outside the plot area", p.Series, pt)
		}
		if i > 0 && (pt[0] < pts[i-1][0] || pt[1] > pts[i-1][1]) {
			t.Fatalf("%s: goes from %v back to %v", p.Series, pts[i-1], pt)
		}
	}
	if len(pts) > 2*n+1 {
		t.Fatalf("%s: %d points for %d samples", p.Series, len(pts), n)
	}
}

// The steps of a small CDF sit exactly at the samples and rise by 1/n.
func TestPlotStepsAtSamples(t *testing.T) {
	var buf bytes.Buffer
	// Max 80 gives ticks every 10 up to 80.
	if err := PlotTTFTCDF(&buf, map[string][]float64{"s": {80, 20, 20, 40}}); err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, buf.Bytes())
	x := func(v float64) float64 { return math.Round((plotLeft+v/80*(plotRight-plotLeft))*10) / 10 }
	y := func(f float64) float64 { return math.Round((plotBottom-f*(plotBottom-plotTop))*10) / 10 }
	want := [][2]float64{{x(20), y(0)}, {x(20), y(0.5)}, {x(40), y(0.5)}, {x(40), y(0.75)}, {x(80), y(0.75)}, {x(80), y(1)}}
	if got := points(t, doc.Paths[0].D); !slices.Equal(got, want) {
		t.Fatalf("path %v, want %v", got, want)
	}
}

func TestPlotRejectsBadSamples(t *testing.T) {
	for _, v := range []float64{-1, math.NaN(), math.Inf(1)} {
		err := PlotTTFTCDF(&bytes.Buffer{}, map[string][]float64{"ok": {1}, "bad": {1, v}})
		if err == nil || !strings.Contains(err.Error(), `"bad": sample 1`) {
			t.Errorf("%v: %v", v, err)
		}
	}
}

// The golden plot doubles as an example to look at.
func TestPlotGolden(t *testing.T) {
	series := map[string][]float64{}
	for _, r := range benchRuns() {
		// Spread samples between p50 and p99 to look like a run.
		var s []float64
		for i := range 200 {
			f := float64(i) / 199
			s = append(s, r.TTFTP50*0.4+f*f*f*(r.TTFTP99-r.TTFTP50*0.4))
		}
		series[r.Name] = s
	}
	var buf bytes.Buffer
	if err := PlotTTFTCDF(&buf, series); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/golden/ttft_cdf.svg", buf.Bytes())
}
