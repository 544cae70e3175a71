// Package promtext reads Prometheus text expositions, the /metrics of the
// engines and of kvrouter's own processes, into samples. expfmt does the
// parsing; this package only picks values out of its metric families.
package promtext

import (
	"bytes"
	"errors"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Exposition is a parsed exposition: its metric families by name.
type Exposition map[string]*dto.MetricFamily

// Sample is one series' value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Parse parses a text exposition (format 0.0.4), failing on the first line
// it cannot read.
func Parse(text []byte) (Exposition, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, err
	}
	return fams, nil
}

// ParseLenient parses a text exposition, leaving out the lines expfmt
// refuses rather than all of it: a poller that reads a few series from an
// engine's /metrics should not be blinded by a line it does not need. The
// samples of a metric family split by a refused line are kept on both
// sides, though after it a histogram's or a summary's read as untyped
// series of their own names (_bucket, _sum, _count).
func ParseLenient(text []byte) Exposition {
	out := Exposition{}
	for len(text) > 0 {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
		for name, f := range fams {
			if have := out[name]; have != nil {
				have.Metric = append(have.Metric, f.Metric...)
			} else {
				out[name] = f
			}
		}
		var perr expfmt.ParseError
		if !errors.As(err, &perr) {
			break
		}
		text = afterLine(text, max(perr.Line, 1))
	}
	return out
}

// afterLine returns text after its nth line.
func afterLine(text []byte, n int) []byte {
	for ; n > 0 && len(text) > 0; n-- {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			return nil
		}
		text = text[i+1:]
	}
	return text
}

// Samples returns the samples of a counter, gauge or untyped metric, in
// the exposition's order; a series whose value did not parse is left out.
func (e Exposition) Samples(name string) []Sample {
	f := e[name]
	out := make([]Sample, 0, len(f.GetMetric()))
	for _, m := range f.GetMetric() {
		var v *float64
		switch {
		case m.Counter != nil:
			v = m.Counter.Value
		case m.Gauge != nil:
			v = m.Gauge.Value
		case m.Untyped != nil:
			v = m.Untyped.Value
		}
		if v == nil {
			continue
		}
		labels := make(map[string]string, len(m.Label))
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		out = append(out, Sample{Labels: labels, Value: *v})
	}
	return out
}

// Sum adds up the samples of name whose labels include every pair of
// match (nil matches every sample).
func (e Exposition) Sum(name string, match map[string]string) float64 {
	var total float64
	for _, s := range e.Samples(name) {
		if s.Has(match) {
			total += s.Value
		}
	}
	return total
}

// Has reports whether s's labels include every pair of match.
func (s Sample) Has(match map[string]string) bool {
	for k, v := range match {
		if l, ok := s.Labels[k]; !ok || l != v {
			return false
		}
	}
	return true
}

// Histogram returns the observations counted and their sum, over every
// series of a histogram.
func (e Exposition) Histogram(name string) (count, sum float64) {
	for _, m := range e[name].GetMetric() {
		if h := m.GetHistogram(); h != nil {
			count += float64(h.GetSampleCount()) + h.GetSampleCountFloat()
			sum += h.GetSampleSum()
		}
	}
	return count, sum
}
