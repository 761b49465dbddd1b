package report

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot size: 8 by 4 inches at 96 dots per inch, 768 by 384 pixels.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 4 * vg.Inch
	dpi        = 96
)

// Files are the report's files, by what they show.
var Files = struct{ Latency, CDF, Throughput, Drain, Page string }{
	"latency.png", "latency-cdf.png", "throughput.png", "drain.png", "report.md"}

var (
	blue   = color.RGBA{R: 0x0b, G: 0x5f, B: 0xd0, A: 0xff}
	green  = color.RGBA{R: 0x16, G: 0x79, B: 0x4a, A: 0xff}
	orange = color.RGBA{R: 0xc0, G: 0x7a, B: 0x00, A: 0xff}
	red    = color.RGBA{R: 0xb3, G: 0x26, B: 0x1e, A: 0xff}
	purple = color.RGBA{R: 0x7b, G: 0x3f, B: 0xb8, A: 0xff}
)

// Write writes r's plots and a Markdown page that embeds them into dir.
func Write(dir string, r Run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	type figure struct {
		file, title, caption string
		draw                 func(Run) (*canvas, error)
	}
	figures := []figure{
		{Files.Latency, "Latency over time", "Percentiles of each second's answers, by when they ended; instances ready and desired on the right-hand scale.", latencyPlot},
		{Files.CDF, "Latency distribution", "Every answer's latency (HDR histogram), the share of answers at or below each.", cdfPlot},
		{Files.Throughput, "Throughput and errors", "Answers, answers other than 2xx, and requests without an answer, each second.", throughputPlot},
	}
	if r.Queue != nil {
		figures = []figure{{Files.Drain, "The drain", "Messages ready on the queue each second; instances ready and desired on the right-hand scale.", drainPlot}}
	}
	var page strings.Builder
	fmt.Fprintf(&page, "# Load on %s\n\n%s, from %s.\n\n```\n", r.URL, r.Mode(), r.Started.Format(time.RFC3339))
	if err := Summary(&page, r); err != nil {
		return err
	}
	page.WriteString("```\n")
	for _, f := range figures {
		c, err := f.draw(r)
		if err != nil {
			return fmt.Errorf("report: %s: %w", f.file, err)
		}
		if err := c.save(filepath.Join(dir, f.file)); err != nil {
			return fmt.Errorf("report: %s: %w", f.file, err)
		}
		fmt.Fprintf(&page, "\n## %s\n%s\n\n![%s](%s)\n", f.title, f.caption, strings.ToLower(f.title), f.file)
	}
	return os.WriteFile(filepath.Join(dir, Files.Page), []byte(page.String()), 0o644)
}

// canvas is a plot being drawn into an image.
type canvas struct {
	img *vgimg.Canvas
	dc  draw.Canvas
}

func newCanvas() *canvas {
	img := vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(dpi))
	return &canvas{img: img, dc: draw.New(img)}
}

func (c *canvas) save(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c.img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	return p
}

func addLine(p *plot.Plot, name string, c color.Color, xys plotter.XYs) (*plotter.Line, error) {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.Color, l.Width = c, vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
	return l, nil
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// legendRoom raises a plot's top above its data, so the legend in its
// corner hides none of it.
const legendRoom = 1.35

// middle is where a second's figures are drawn: in its middle.
func middle(s time.Duration) float64 { return s.Seconds() + .5 }

// span is the run's time axis: every second of the load and every
// platform sample.
func span(r Run) float64 {
	end := r.Result.Elapsed.Seconds()
	if n := len(r.Result.Seconds); n > 0 {
		end = max(end, r.Result.Seconds[n-1].At.Seconds()+1)
	}
	if n := len(r.Platform); n > 0 {
		end = max(end, r.Platform[n-1].At.Seconds())
	}
	if q := r.Queue; q != nil && len(q.Depth) > 0 {
		end = max(end, q.Depth[len(q.Depth)-1].At.Seconds())
	}
	return max(end, 1)
}

// latencyPlot draws each second's p50, p90 and p99 against the left axis
// and the instances ready and desired against a right-hand one.
func latencyPlot(r Run) (*canvas, error) {
	p := newPlot("Latency over time", "seconds", "latency (ms)")
	var p50, p90, p99 plotter.XYs
	for _, s := range r.Result.Seconds {
		if s.Requests == 0 {
			continue
		}
		x := middle(s.At)
		p50 = append(p50, plotter.XY{X: x, Y: float64(s.Latency.P50) / 1e6})
		p90 = append(p90, plotter.XY{X: x, Y: float64(s.Latency.P90) / 1e6})
		p99 = append(p99, plotter.XY{X: x, Y: float64(s.Latency.P99) / 1e6})
	}
	for _, l := range []struct {
		name string
		c    color.Color
		xys  plotter.XYs
	}{{"p50", green, p50}, {"p90", orange, p90}, {"p99", red, p99}} {
		if len(l.xys) == 0 {
			continue
		}
		if _, err := addLine(p, l.name, l.c, l.xys); err != nil {
			return nil, err
		}
	}
	return withInstances(p, r), nil
}

// drainPlot draws the queue's ready messages each second against the left
// axis and the instances against a right-hand one.
func drainPlot(r Run) (*canvas, error) {
	p := newPlot("The drain", "seconds", "messages ready")
	var xys plotter.XYs
	for _, d := range r.Queue.Depth {
		xys = append(xys, plotter.XY{X: seconds(d.At), Y: float64(d.Ready)})
	}
	if len(xys) == 0 {
		xys = plotter.XYs{{}}
	}
	if _, err := addLine(p, "messages ready", orange, xys); err != nil {
		return nil, err
	}
	return withInstances(p, r), nil
}

// withInstances draws p over the run's span, with the instances ready and
// desired on a right-hand scale when the platform was sampled.
func withInstances(p *plot.Plot, r Run) *canvas {
	p.Y.Min, p.X.Min, p.X.Max = 0, 0, span(r)
	p.Y.Max *= legendRoom
	c := newCanvas()
	if len(r.Platform) == 0 {
		p.Draw(c.dc)
		return c
	}
	// The instances' scale needs room on the right.
	area := draw.Crop(c.dc, 0, -vg.Points(36), 0, 0)
	inst := plot.New()
	ready, desired := instanceLines(r.Platform, inst)
	p.Legend.Add("instances ready (right)", ready)
	p.Legend.Add("instances desired (right)", desired)
	p.Draw(area)
	dc := p.DataCanvas(area)
	inst.X.Min, inst.X.Max = p.X.Min, p.X.Max
	ready.Plot(dc, inst)
	desired.Plot(dc, inst)
	rightAxis(dc, inst, "instances")
	return c
}

// instanceLines are the ready and desired steps, on inst's Y range.
func instanceLines(samples []PlatformSample, inst *plot.Plot) (ready, desired *plotter.Line) {
	var r, d plotter.XYs
	most := 1
	for _, s := range samples {
		r = append(r, plotter.XY{X: seconds(s.At), Y: float64(s.Ready)})
		d = append(d, plotter.XY{X: seconds(s.At), Y: float64(s.Desired)})
		most = max(most, s.Ready, s.Desired)
	}
	inst.Y.Min, inst.Y.Max = 0, float64(most)*legendRoom
	ready, _ = plotter.NewLine(r)
	desired, _ = plotter.NewLine(d)
	ready.Color, ready.Width, ready.StepStyle = blue, vg.Points(2), plotter.PreStep
	desired.Color, desired.Width, desired.StepStyle = purple, vg.Points(1), plotter.PreStep
	desired.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	return ready, desired
}

// rightAxis draws p's Y scale on the right edge of the data canvas dc.
func rightAxis(dc draw.Canvas, p *plot.Plot, label string) {
	sty := draw.LineStyle{Color: color.Black, Width: vg.Points(0.5)}
	txt := p.Y.Tick.Label
	x := dc.Max.X
	dc.StrokeLine2(sty, x, dc.Min.Y, x, dc.Max.Y)
	for _, t := range (plot.DefaultTicks{}).Ticks(p.Y.Min, p.Y.Max) {
		if t.Label == "" || t.Value != float64(int(t.Value)) {
			continue
		}
		y := dc.Y(p.Y.Norm(t.Value))
		dc.StrokeLine2(sty, x, y, x+vg.Points(4), y)
		txt.XAlign, txt.YAlign = draw.XLeft, draw.YCenter
		dc.FillText(txt, vg.Point{X: x + vg.Points(6), Y: y}, t.Label)
	}
	txt.XAlign, txt.YAlign = draw.XRight, draw.YBottom
	dc.FillText(txt, vg.Point{X: x + vg.Points(30), Y: dc.Max.Y + vg.Points(4)}, label)
}

// cdfPlot draws the share of answers at or below each latency, on a log
// scale of latency.
func cdfPlot(r Run) (*canvas, error) {
	p := newPlot("Latency distribution", "latency (ms, log scale)", "answers at or below (%)")
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	h := hdrhistogram.Import(r.Result.Histogram)
	var xys plotter.XYs
	for _, b := range h.CumulativeDistribution() {
		if b.Count == 0 {
			continue
		}
		xys = append(xys, plotter.XY{X: max(float64(b.ValueAt)/1e3, 1e-3), Y: b.Quantile})
	}
	if len(xys) == 0 {
		xys = plotter.XYs{{X: 1e-3, Y: 0}}
	}
	if _, err := addLine(p, "answers", blue, xys); err != nil {
		return nil, err
	}
	p.Y.Min, p.Y.Max = 0, 100
	c := newCanvas()
	p.Draw(c.dc)
	return c, nil
}

// throughputPlot draws each second's answers, non-2xx answers and
// requests without an answer.
func throughputPlot(r Run) (*canvas, error) {
	p := newPlot("Throughput and errors", "seconds", "per second")
	var ok, bad, failed plotter.XYs
	for _, s := range r.Result.Seconds {
		x := middle(s.At)
		var not2xx int64
		for code, n := range s.Codes {
			if code < 200 || code > 299 {
				not2xx += n
			}
		}
		ok = append(ok, plotter.XY{X: x, Y: float64(s.Requests)})
		bad = append(bad, plotter.XY{X: x, Y: float64(not2xx)})
		failed = append(failed, plotter.XY{X: x, Y: float64(s.Errors)})
	}
	if len(ok) == 0 {
		ok, bad, failed = plotter.XYs{{}}, plotter.XYs{{}}, plotter.XYs{{}}
	}
	for _, l := range []struct {
		name string
		c    color.Color
		xys  plotter.XYs
	}{{"answers", blue, ok}, {"not 2xx", orange, bad}, {"no answer", red, failed}} {
		if _, err := addLine(p, l.name, l.c, l.xys); err != nil {
			return nil, err
		}
	}
	p.Y.Min, p.X.Min, p.X.Max = 0, 0, span(r)
	p.Y.Max *= legendRoom
	c := newCanvas()
	p.Draw(c.dc)
	return c, nil
}
