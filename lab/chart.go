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

// chartGlyphs mark the points: a different shape for each series, hollow
// and filled in turn, so that a series drawn over another leaves it
// visible.
var chartGlyphs = []draw.GlyphDrawer{
	draw.RingGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.CrossGlyph{},
	draw.CircleGlyph{}, draw.PyramidGlyph{}, draw.BoxGlyph{}, draw.PlusGlyph{},
}

// WriteChartPNG draws c as a line chart — one line per series, with a
// legend and the axis labels, and a logarithmic Y axis if c.LogY — and
// writes it to w as a PNG image.
//
// Each series has its own colour, dash pattern and marker, and the series
// drawn first have the widest lines and the largest markers, so that a
// series that coincides with another (two routes both at 100%) shows as a
// line inside a line rather than disappearing. The legend sits to the right
// of the data, never on it.
//
// On a log axis, points whose Y is not above zero cannot be drawn and are
// left out; if no point is left, the axis is linear. Points with a NaN or
// infinite coordinate are always left out.
func WriteChartPNG(w io.Writer, c Chart) error { return writeChart(w, c, "png") }

// WriteChartSVG draws c as WriteChartPNG does and writes it to w as an SVG
// image.
func WriteChartSVG(w io.Writer, c Chart) error { return writeChart(w, c, "svg") }

func writeChart(w io.Writer, c Chart, format string) error {
	p, leg, err := chartPlot(c)
	if err != nil {
		return err
	}
	cv, err := draw.NewFormattedCanvas(chartWidth, chartHeight, format)
	if err != nil {
		return fmt.Errorf("lab: chart %q: %w", c.File, err)
	}
	dc := draw.New(cv)
	legendWidth := vg.Length(0)
	if len(leg.entries) > 0 {
		for _, e := range leg.entries {
			legendWidth = max(legendWidth, leg.ThumbnailWidth+leg.TextStyle.Rectangle("  "+e).Max.X)
		}
		legendWidth += vg.Points(12)
	}
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	if legendWidth > 0 {
		// Entries start level with the top of the data area, under the
		// title.
		top := vg.Points(8)
		if c.Title != "" {
			top += p.Title.TextStyle.Rectangle(c.Title).Max.Y + p.Title.Padding
		}
		la := draw.Crop(dc, chartWidth-legendWidth+vg.Points(6), 0, 0, -top)
		leg.Legend.Draw(la)
	}
	if _, err := cv.WriteTo(w); err != nil {
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

// chartLegend is a legend drawn beside the plot, with the names of its
// entries.
type chartLegend struct {
	plot.Legend
	entries []string
}

// chartStyle is how series i of n is drawn.
type chartStyle struct {
	color  color.Color
	dashes []vg.Length
	width  vg.Length
	glyph  draw.GlyphDrawer
	radius vg.Length
}

func seriesStyle(i, n int) chartStyle {
	// From the first series drawn to the last: lines from 4 to 1.5
	// points wide, markers from 4.5 to 2.5 points in radius.
	f := 0.0
	if n > 1 {
		f = float64(n-1-i) / float64(n-1)
	}
	return chartStyle{
		color:  chartColors[i%len(chartColors)],
		dashes: chartDashes[i%len(chartDashes)],
		width:  vg.Points(1.5 + 2.5*f),
		glyph:  chartGlyphs[i%len(chartGlyphs)],
		radius: vg.Points(2.5 + 2*f),
	}
}

func chartPlot(c Chart) (*plot.Plot, *chartLegend, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Add(plotter.NewGrid())
	leg := &chartLegend{Legend: plot.NewLegend()}
	leg.Top, leg.Left = true, true
	leg.ThumbnailWidth = vg.Points(28)

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
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, nil, fmt.Errorf("lab: chart %q, series %q: %w", c.File, s.Name, err)
		}
		marks, err := plotter.NewScatter(markedPoints(pts, i))
		if err != nil {
			return nil, nil, fmt.Errorf("lab: chart %q, series %q: %w", c.File, s.Name, err)
		}
		st := seriesStyle(i, len(c.Series))
		line.Color = st.color
		line.Width = st.width
		line.Dashes = st.dashes
		marks.Color = st.color
		marks.Shape = st.glyph
		marks.Radius = st.radius
		p.Add(line, marks)
		leg.Add(s.Name, line, marks)
		leg.entries = append(leg.entries, s.Name)
	}
	if drawn > 0 {
		chartRange(p, c, logY)
	}
	return p, leg, nil
}

// chartMarks is about how many markers a series gets at most: on a long
// series, every k-th point is marked, each series from a different phase,
// so that coinciding series show their markers side by side.
const chartMarks = 25

func markedPoints(pts plotter.XYs, i int) plotter.XYs {
	k := (len(pts) + chartMarks - 1) / chartMarks
	if k <= 1 {
		return pts
	}
	var out plotter.XYs
	for j := i % k; j < len(pts); j += k {
		out = append(out, pts[j])
	}
	return out
}

// chartRange bounds the Y axis: from zero on a linear axis when no value
// is negative, to c.YMax if set (100 for a percentage) or else the data's
// top.
func chartRange(p *plot.Plot, c Chart, logY bool) {
	if !logY && p.Y.Min > 0 {
		p.Y.Min = 0
	}
	if c.YMax > 0 && c.YMax > p.Y.Min {
		p.Y.Max = c.YMax
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
