// Command chart draws the benchmark's sweep charts as SVG with gonum/plot.
// It is a module of its own so that the library's go.mod and `go build ./...`
// never pull in gonum, fonts and image code: `go run ./bench -sweep W2` in
// the repository root writes the sweep's JSON, then runs this with the
// charts to draw on its standard input:
//
//	{"charts":[{"file":"docs/perf/w2-sweep.svg","title":"W2 throughput",
//	  "x_label":"workers","y_label":"pairs/s","log_x":true,
//	  "series":[{"name":"fencelock","points":[{"x":1,"y":310}, ...]}, ...]}]}
//
// Files are written as given (relative to -dir, default the current dir).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Spec is the input: the charts to draw.
type Spec struct {
	Charts []Chart `json:"charts"`
}

// Chart is one SVG: lines with points, on shared axes.
type Chart struct {
	File   string   `json:"file"`
	Title  string   `json:"title"`
	XLabel string   `json:"x_label"`
	YLabel string   `json:"y_label"`
	LogX   bool     `json:"log_x"`
	LogY   bool     `json:"log_y"`
	Series []Series `json:"series"`
}

// Series is one named line. Color (#rrggbb) and Dashed are optional: by
// default each series takes the next colour of the palette, solid.
type Series struct {
	Name   string  `json:"name"`
	Color  string  `json:"color,omitempty"`
	Dashed bool    `json:"dashed,omitempty"`
	Points []Point `json:"points"`
}

// Point is one (x, y).
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

func main() {
	dir := flag.String("dir", ".", "write the charts' files relative to this dir")
	flag.Parse()
	var s Spec
	if err := json.NewDecoder(os.Stdin).Decode(&s); err != nil {
		fmt.Fprintln(os.Stderr, "chart: read spec:", err)
		os.Exit(1)
	}
	for _, c := range s.Charts {
		if err := writeFile(filepath.Join(*dir, c.File), c); err != nil {
			fmt.Fprintln(os.Stderr, "chart:", err)
			os.Exit(1)
		}
	}
}

func writeFile(path string, c Chart) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(out, c); err != nil {
		out.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return out.Close()
}

// palette gives each series its own colour and dash, in order.
var palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
}

// Write draws c as SVG to w. Points that a log axis cannot show (x or y
// not above 0) are left out; a series left with none is an error, as is a
// chart without series.
func Write(w io.Writer, c Chart) error {
	if len(c.Series) == 0 {
		return errors.New("chart has no series")
	}
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Legend.Top = true
	p.Legend.Left = true
	if c.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = ticksAt(c, func(pt Point) float64 { return pt.X })
	}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	for i, s := range c.Series {
		var xys plotter.XYs
		for _, pt := range s.Points {
			if (c.LogX && pt.X <= 0) || (c.LogY && pt.Y <= 0) || math.IsNaN(pt.X) || math.IsNaN(pt.Y) {
				continue
			}
			xys = append(xys, plotter.XY{X: pt.X, Y: pt.Y})
		}
		if len(xys) == 0 {
			return fmt.Errorf("series %q has no point to draw", s.Name)
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("series %q: %w", s.Name, err)
		}
		col := palette[i%len(palette)]
		if s.Color != "" {
			if col, err = parseColor(s.Color); err != nil {
				return fmt.Errorf("series %q: %w", s.Name, err)
			}
		}
		line.Color, points.Color = col, col
		line.Width = vg.Points(1.5)
		if s.Dashed || i >= len(palette) {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(2.5)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
	}
	wt, err := p.WriterTo(7*vg.Inch, 4.5*vg.Inch, "svg")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

// parseColor reads #rrggbb.
func parseColor(s string) (color.RGBA, error) {
	var r, g, b uint8
	if len(s) != 7 || s[0] != '#' {
		return color.RGBA{}, fmt.Errorf("colour %q: want #rrggbb", s)
	}
	if _, err := fmt.Sscanf(s[1:], "%02x%02x%02x", &r, &g, &b); err != nil {
		return color.RGBA{}, fmt.Errorf("colour %q: %w", s, err)
	}
	return color.RGBA{R: r, G: g, B: b, A: 0xff}, nil
}

// ticksAt labels a log x axis at the x values the series have (the sweep's
// points, such as 1, 2, 4, ... 256 workers), which read better than powers
// of ten.
func ticksAt(c Chart, x func(Point) float64) plot.Ticker {
	seen := map[float64]bool{}
	var ticks plot.ConstantTicks
	for _, s := range c.Series {
		for _, pt := range s.Points {
			v := x(pt)
			if v > 0 && !seen[v] {
				seen[v] = true
				ticks = append(ticks, plot.Tick{Value: v, Label: short(v)})
			}
		}
	}
	return ticks
}

// short writes 1000 as 1k and 1000000 as 1M.
func short(v float64) string {
	switch {
	case v >= 1e6 && math.Mod(v, 1e5) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3 && math.Mod(v, 100) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}
