package lab

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart size in the report: 8×5 inches, 768×480 pixels at the PNG
// canvas's 96 dpi.
const (
	chartWidth  = 8 * vg.Inch
	chartHeight = 5 * vg.Inch
)

// chartColors tell the lines apart (gonum/plot's plotutil.DarkColors, with
// black for an eighth line); lines beyond them also get a dash pattern.
var chartColors = []color.Color{
	color.RGBA{238, 46, 47, 255},
	color.RGBA{0, 140, 72, 255},
	color.RGBA{24, 90, 169, 255},
	color.RGBA{244, 125, 35, 255},
	color.RGBA{102, 44, 145, 255},
	color.RGBA{162, 29, 33, 255},
	color.RGBA{180, 56, 148, 255},
	color.RGBA{0, 0, 0, 255},
}

var chartDashes = [][]vg.Length{
	nil,
	{vg.Points(6), vg.Points(2)},
	{vg.Points(2), vg.Points(2)},
	{vg.Points(6), vg.Points(2), vg.Points(2), vg.Points(2)},
}

// WriteChartPNG draws c as a line chart — one line per series, with a
// legend and the axis labels, and a logarithmic Y axis if c.LogY — and
// writes it to w as a PNG image.
//
// On a log axis, points whose Y is not above zero cannot be drawn and are
// left out; if no point is left, the axis is linear. Points with a NaN or
// infinite coordinate are always left out.
func WriteChartPNG(w io.Writer, c Chart) error {
	p, err := chartPlot(c)
	if err != nil {
		return err
	}
	wt, err := p.WriterTo(chartWidth, chartHeight, "png")
	if err != nil {
		return fmt.Errorf("lab: chart %q: %w", c.File, err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("lab: chart %q: %w", c.File, err)
	}
	return nil
}

// ChartPNG returns c drawn as a PNG image (see WriteChartPNG).
func ChartPNG(c Chart) ([]byte, error) {
	var buf bytes.Buffer
	if err := WriteChartPNG(&buf, c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func chartPlot(c Chart) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.ThumbnailWidth = vg.Points(24)

	logY := false
	if c.LogY {
		for _, s := range c.Series {
			if len(chartPoints(s, true)) > 0 {
				logY = true
				break
			}
		}
	}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	}

	p.X.Tick.Marker = linearTicks{}
	if !logY {
		p.Y.Tick.Marker = linearTicks{}
	}

	drawn := 0
	for i, s := range c.Series {
		pts := chartPoints(s, logY)
		if len(pts) == 0 {
			continue
		}
		drawn++
		line, marks, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("lab: chart %q, series %q: %w", c.File, s.Name, err)
		}
		col := chartColors[i%len(chartColors)]
		line.Color = col
		line.Width = vg.Points(1.5)
		line.Dashes = chartDashes[(i/len(chartColors))%len(chartDashes)]
		marks.Color = col
		marks.Shape = draw.CircleGlyph{}
		marks.Radius = vg.Points(2)
		p.Add(line, marks)
		p.Legend.Add(s.Name, line, marks)
	}
	if drawn > 0 {
		chartHeadroom(p, c, drawn, logY)
	}
	return p, nil
}

// chartHeadroom starts a linear Y axis at zero when no value is negative,
// and raises the top of the Y axis so that the legend, in the top left
// corner, sits above the data rather than on it.
func chartHeadroom(p *plot.Plot, c Chart, entries int, logY bool) {
	if !logY && p.Y.Min > 0 {
		p.Y.Min = 0
	}
	// The legend's share of the data area's height: one line of text and
	// padding per entry, over the chart height less the title and the X
	// axis (about an inch and a quarter).
	legend := float64(entries)*float64(p.Legend.TextStyle.FontExtents().Height+p.Legend.Padding) + float64(vg.Points(8))
	share := min(0.6, legend/float64(chartHeight-vg.Points(90)))
	if logY {
		lo, hi := math.Log10(p.Y.Min), math.Log10(p.Y.Max)
		if hi > lo {
			p.Y.Max = math.Pow(10, lo+(hi-lo)/(1-share))
		}
		return
	}
	if p.Y.Max > p.Y.Min {
		p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)/(1-share)
	}
}

// linearTicks marks a linear axis with about seven labelled ticks at round
// values (1, 2 or 5 times a power of ten apart) and an unlabelled one
// between each two.
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return nil
	}
	// The round step nearest (in ratio) to a seventh of the range.
	raw := (hi - lo) / 7
	pow := math.Pow10(int(math.Floor(math.Log10(raw))))
	step := pow
	for _, m := range []float64{2, 5, 10} {
		if math.Abs(math.Log(m*pow/raw)) < math.Abs(math.Log(step/raw)) {
			step = m * pow
		}
	}
	decimals := max(0, -int(math.Floor(math.Log10(step))))
	var ticks []plot.Tick
	for k := math.Ceil(lo / step * 2); k/2*step <= hi*(1+1e-12)+1e-300; k++ {
		v := k / 2 * step
		t := plot.Tick{Value: v}
		if math.Mod(k, 2) == 0 {
			t.Label = strconv.FormatFloat(v, 'f', decimals, 64)
			if t.Label == "-0" {
				t.Label = "0"
			}
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// chartPoints returns the drawable points of s: both coordinates finite,
// and Y above zero on a log axis.
func chartPoints(s Series, logY bool) plotter.XYs {
	n := min(len(s.X), len(s.Y))
	pts := make(plotter.XYs, 0, n)
	for i := range n {
		x, y := s.X[i], s.Y[i]
		if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) {
			continue
		}
		if logY && y <= 0 {
			continue
		}
		pts = append(pts, plotter.XY{X: x, Y: y})
	}
	return pts
}

// logTicks marks a log axis: a labelled tick at each power of ten and
// unlabelled ones at 2…9 times it; when the axis spans less than two
// decades, 2 and 5 times each power are labelled too. Unlike gonum/plot's
// LogTicks it labels powers below the range's first integer power (0.1
// for an axis from 0.3).
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi >= lo) {
		return nil
	}
	first := int(math.Floor(math.Log10(lo)))
	last := int(math.Ceil(math.Log10(hi)))
	dense := last-first <= 2
	var ticks []plot.Tick
	for e := first; e <= last; e++ {
		pow := math.Pow10(e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * pow
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || (dense && (m == 2 || m == 5)) {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
