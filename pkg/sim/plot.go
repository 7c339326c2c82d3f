package sim

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Plot files WritePlots writes.
const (
	PlotQueueLength = "queue_length.svg"
	PlotDelayCDF    = "queue_delay_cdf.svg"
	PlotPredicted   = "predicted_vs_actual_wait.svg"
)

// WritePlots writes hand-made SVG charts of a report into dir (created if
// missing): the queue length over time per policy, the CDF of queueing
// delay per policy and, with estimates, gpuq's predicted (P50, P90) against
// actual waits. It returns the files written.
func WritePlots(dir string, rep *Report, policies []string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	write := func(name string, b []byte) error {
		p := filepath.Join(dir, name)
		files = append(files, p)
		return os.WriteFile(p, b, 0o644)
	}
	// 1. Queue length over time: the step function, at most 1,000 buckets
	//    per policy, each drawn at the most tasks queued within it.
	var ql []line
	for k, name := range policies {
		pts := rep.QueueLength[name]
		xs, ys := bucketMax(pts, 1000)
		ql = append(ql, line{name: name, xs: xs, ys: ys, color: palette[k%len(palette)]})
	}
	if err := write(PlotQueueLength, chart{title: "Queue length over time", xlabel: "days since the first submission",
		ylabel: "tasks queued (max per bucket)", lines: ql}.svg()); err != nil {
		return files, err
	}
	// 2. CDF of queueing delay, log x from one second; a wait under a
	//    second counts at one second.
	var cdf []line
	hi := 1.0
	for _, name := range policies {
		for _, w := range rep.Waits[name] {
			hi = math.Max(hi, w.Seconds())
		}
	}
	for k, name := range policies {
		ws := make([]float64, len(rep.Waits[name]))
		for i, w := range rep.Waits[name] {
			ws[i] = math.Max(w.Seconds(), 1)
		}
		slices.Sort(ws)
		var xs, ys []float64
		for i := 0; i <= 400; i++ {
			x := math.Pow(hi, float64(i)/400)
			n, _ := slices.BinarySearch(ws, math.Nextafter(x, math.Inf(1)))
			xs = append(xs, x)
			ys = append(ys, float64(n)/math.Max(1, float64(len(ws))))
		}
		cdf = append(cdf, line{name: name, xs: xs, ys: ys, color: palette[k%len(palette)]})
	}
	if err := write(PlotDelayCDF, chart{title: "Queueing delay (CDF)", xlabel: "queueing delay (log scale; < 1 s shown at 1 s)",
		ylabel: "share of tasks", lines: cdf, logX: true, yMax: 1}.svg()); err != nil {
		return files, err
	}
	// 3. Predicted vs actual wait, log-log, at most 3,000 tasks (every
	//    k-th judged task, in submit order).
	if len(rep.WaitEstimates) > 0 {
		step := max(1, (len(rep.WaitEstimates)+2999)/3000)
		var p50, p90 line
		p50 = line{name: "gpuq P50 at submission", color: palette[0], points: true}
		p90 = line{name: "gpuq P90 at submission", color: palette[1], points: true}
		lo, top := math.Inf(1), 1.0
		for i := 0; i < len(rep.WaitEstimates); i += step {
			w := rep.WaitEstimates[i]
			a := w.Actual.Seconds()
			p50.xs, p50.ys = append(p50.xs, a), append(p50.ys, math.Max(w.P50.Seconds(), 1))
			p90.xs, p90.ys = append(p90.xs, a), append(p90.ys, math.Max(w.P90.Seconds(), 1))
			lo = math.Min(lo, a)
			top = math.Max(top, math.Max(a, w.P90.Seconds()))
		}
		diag := line{name: "predicted = actual", xs: []float64{1, top}, ys: []float64{1, top}, color: "#888888", dashed: true}
		if err := write(PlotPredicted, chart{title: "Predicted vs actual wait (gpuq, tasks that waited ≥ 60 s)",
			xlabel: "actual wait (log scale)", ylabel: "predicted wait (log scale)", lines: []line{p90, p50, diag},
			logX: true, logY: true}.svg()); err != nil {
			return files, err
		}
	}
	return files, nil
}

// bucketMax reduces a step function to at most n buckets over its span,
// each at the largest value it takes within the bucket; x in days.
func bucketMax(pts []Point, n int) (xs, ys []float64) {
	if len(pts) == 0 {
		return nil, nil
	}
	first, last := pts[0].At, pts[len(pts)-1].At
	span := last - first
	if span <= 0 {
		return []float64{first.Hours() / 24}, []float64{float64(pts[0].N)}
	}
	width := span / time.Duration(n)
	if width <= 0 {
		width = 1
	}
	i := 0
	for b := 0; b <= n; b++ {
		from, to := first+time.Duration(b)*width, first+time.Duration(b+1)*width
		if from > last {
			break
		}
		// The value in force at the bucket's start, and every change in it.
		for i+1 < len(pts) && pts[i+1].At <= from {
			i++
		}
		m := pts[i].N
		for j := i + 1; j < len(pts) && pts[j].At < to; j++ {
			m = max(m, pts[j].N)
		}
		xs = append(xs, from.Hours()/24)
		ys = append(ys, float64(m))
	}
	return xs, ys
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

type line struct {
	name   string
	xs, ys []float64
	color  string
	points bool // a scatter: dots, no line
	dashed bool
}

type chart struct {
	title, xlabel, ylabel string
	lines                 []line
	logX, logY            bool
	yMax                  float64 // 0: from the data
}

// Chart geometry, in SVG user units.
const (
	plotW, plotH           = 960.0, 560.0
	padL, padR, padT, padB = 80.0, 230.0, 50.0, 60.0
)

func (c chart) svg() []byte {
	// 1. Ranges.
	x0, x1, y0, y1 := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	if c.logY {
		y0 = math.Inf(1)
	}
	for _, l := range c.lines {
		for i := range l.xs {
			x0, x1 = math.Min(x0, l.xs[i]), math.Max(x1, l.xs[i])
			y1 = math.Max(y1, l.ys[i])
			if c.logY {
				y0 = math.Min(y0, l.ys[i])
			}
		}
	}
	if math.IsInf(x0, 0) {
		x0, x1, y0, y1 = 0, 1, 0, 1
	}
	if c.logX {
		x0 = math.Max(1, x0)
		x1 = math.Max(x1, x0*10)
	}
	if c.logY {
		y0 = math.Max(1, y0)
		y1 = math.Max(y1, y0*10)
	}
	if c.yMax > 0 {
		y1 = c.yMax
	}
	if x1 <= x0 {
		x1 = x0 + 1
	}
	if y1 <= y0 {
		y1 = y0 + 1
	}
	if !c.logY && c.yMax == 0 {
		y1 *= 1.05
	}
	sx := scale(x0, x1, padL, plotW-padR, c.logX)
	sy := scale(y0, y1, plotH-padB, padT, c.logY)

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n",
		plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%g" y="28" font-size="16">%s</text>`+"\n", padL, esc(c.title))
	// 2. Axes, ticks and grid.
	for _, t := range ticks(x0, x1, c.logX) {
		x := sx(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#e5e5e5"/>`+"\n", x, padT, x, plotH-padB)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x, plotH-padB+16, esc(label(t, c.logX)))
	}
	for _, t := range ticks(y0, y1, c.logY) {
		y := sy(t)
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#e5e5e5"/>`+"\n", padL, y, plotW-padR, y)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, esc(label(t, c.logY)))
	}
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="black"/>`+"\n", padL, padT, plotW-padR-padL, plotH-padB-padT)
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", (padL+plotW-padR)/2, plotH-18, esc(c.xlabel))
	fmt.Fprintf(&b, `<text transform="translate(18,%g) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (padT+plotH-padB)/2, esc(c.ylabel))
	// 3. Data, clipped to the plot area.
	fmt.Fprintf(&b, `<clipPath id="area"><rect x="%g" y="%g" width="%g" height="%g"/></clipPath>`+"\n", padL, padT, plotW-padR-padL, plotH-padB-padT)
	fmt.Fprintf(&b, `<g clip-path="url(#area)">`+"\n")
	for _, l := range c.lines {
		if l.points {
			fmt.Fprintf(&b, `<g fill="%s" fill-opacity="0.35">`, l.color)
			for i := range l.xs {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2"/>`, sx(l.xs[i]), sy(l.ys[i]))
			}
			b.WriteString("</g>\n")
			continue
		}
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="`, l.color, dash)
		for i := range l.xs {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", sx(l.xs[i]), sy(l.ys[i]))
		}
		b.WriteString(`"/>` + "\n")
	}
	b.WriteString("</g>\n")
	// 4. Legend.
	for k, l := range c.lines {
		y := padT + 10 + float64(k)*20
		x := plotW - padR + 16
		if l.points {
			fmt.Fprintf(&b, `<circle cx="%g" cy="%g" r="4" fill="%s"/>`, x+10, y, l.color)
		} else {
			fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"/>`, x, y, x+20, y, l.color)
		}
		fmt.Fprintf(&b, `<text x="%g" y="%g">%s</text>`+"\n", x+28, y+4, esc(l.name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func scale(d0, d1, r0, r1 float64, log bool) func(float64) float64 {
	if log {
		l0, l1 := math.Log10(d0), math.Log10(d1)
		return func(v float64) float64 { return r0 + (math.Log10(math.Max(v, d0/10))-l0)/(l1-l0)*(r1-r0) }
	}
	return func(v float64) float64 { return r0 + (v-d0)/(d1-d0)*(r1-r0) }
}

// logTicks are the log-scale ticks, in seconds.
var logTicks = []float64{1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 28 * 86400, 364 * 86400}

func ticks(lo, hi float64, log bool) []float64 {
	var out []float64
	if log {
		for _, t := range logTicks {
			if t >= lo && t <= hi {
				out = append(out, t)
			}
		}
		return out
	}
	step := niceStep((hi - lo) / 8)
	for t := math.Ceil(lo/step) * step; t <= hi+step*1e-9; t += step {
		out = append(out, t)
	}
	return out
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func label(v float64, log bool) string {
	if log {
		switch {
		case v >= 7*86400:
			return fmt.Sprintf("%gw", v/(7*86400))
		case v >= 86400:
			return fmt.Sprintf("%gd", v/86400)
		case v >= 3600:
			return fmt.Sprintf("%gh", v/3600)
		case v >= 60:
			return fmt.Sprintf("%gmin", v/60)
		}
		return fmt.Sprintf("%gs", v)
	}
	return fmt.Sprintf("%g", math.Round(v*1000)/1000)
}

func esc(s string) string { return html.EscapeString(s) }
