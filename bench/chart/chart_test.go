package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// svgDoc parses b as XML and returns the root element's name, the texts of
// its <text> elements and the number of drawn paths.
func svgDoc(t *testing.T, b []byte) (root string, texts []string, paths int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			inText = el.Name.Local == "text"
			if el.Name.Local == "path" {
				paths++
			}
		case xml.CharData:
			if inText {
				texts = append(texts, strings.TrimSpace(string(el)))
			}
		case xml.EndElement:
			inText = false
		}
	}
	return root, texts, paths
}

func twoSeries() Chart {
	return Chart{Title: "W2 throughput", XLabel: "workers", YLabel: "pairs/s", LogX: true,
		Series: []Series{
			{Name: "fencelock", Points: []Point{{1, 300}, {2, 590}, {4, 1100}, {256, 9000}}},
			{Name: "etcd", Points: []Point{{1, 200}, {2, 380}, {4, 700}, {256, 4000}}},
		}}
}

func TestWriteDrawsParseableSVGWithBothSeries(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, twoSeries()); err != nil {
		t.Fatal(err)
	}
	root, texts, paths := svgDoc(t, buf.Bytes())
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	has := map[string]bool{}
	for _, s := range texts {
		has[s] = true
	}
	for _, want := range []string{"fencelock", "etcd", "W2 throughput", "workers", "pairs/s", "256"} {
		if !has[want] {
			t.Errorf("no text %q in the SVG; texts: %q", want, texts)
		}
	}
	// Two lines at least, besides the axes and grid: an SVG without
	// the series would still have a title and labels.
	var one bytes.Buffer
	c := twoSeries()
	c.Series = c.Series[:1]
	if err := Write(&one, c); err != nil {
		t.Fatal(err)
	}
	_, _, onePaths := svgDoc(t, one.Bytes())
	if paths <= onePaths {
		t.Fatalf("two series drew %d paths, one drew %d", paths, onePaths)
	}
}

func TestWriteRefusesEmptyCharts(t *testing.T) {
	if err := Write(io.Discard, Chart{Title: "none"}); err == nil {
		t.Fatal("a chart without series was drawn")
	}
	c := Chart{LogY: true, Series: []Series{{Name: "zeros", Points: []Point{{1, 0}, {2, 0}}}}}
	if err := Write(io.Discard, c); err == nil || !strings.Contains(err.Error(), "zeros") {
		t.Fatalf("a log chart of zeros: %v", err)
	}
}

func TestSeriesColoursAndDashes(t *testing.T) {
	c := twoSeries()
	c.Series[0].Color, c.Series[1].Color, c.Series[1].Dashed = "#123456", "#abcdef", true
	var buf bytes.Buffer
	if err := Write(&buf, c); err != nil {
		t.Fatal(err)
	}
	svg := strings.ToLower(buf.String())
	for _, want := range []string{"#123456", "#abcdef", "stroke-dasharray"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG has no %q", want)
		}
	}
	c.Series[0].Color = "blue"
	if err := Write(io.Discard, c); err == nil {
		t.Fatal("a colour not #rrggbb was taken")
	}
}

func TestShortLabels(t *testing.T) {
	for v, want := range map[float64]string{1: "1", 256: "256", 10000: "10k", 30000: "30k", 1e6: "1M", 1.5e6: "1.5M"} {
		if got := short(v); got != want {
			t.Errorf("short(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestCommandWritesEveryChart runs main as the bench driver does: a spec on
// standard input, files written under -dir.
func TestCommandWritesEveryChart(t *testing.T) {
	if os.Getenv("CHART_AS_COMMAND") == "1" {
		os.Args = []string{"chart", "-dir", os.Getenv("CHART_DIR")}
		main()
		os.Exit(0)
	}
	dir := t.TempDir()
	a, b := twoSeries(), twoSeries()
	a.File, b.File = "perf/a.svg", "perf/b.svg"
	spec, err := json.Marshal(Spec{Charts: []Chart{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCommandWritesEveryChart$")
	cmd.Env = append(os.Environ(), "CHART_AS_COMMAND=1", "CHART_DIR="+dir)
	cmd.Stdin = bytes.NewReader(spec)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chart: %v\n%s", err, out)
	}
	for _, f := range []string{"perf/a.svg", "perf/b.svg"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if root, _, _ := svgDoc(t, data); root != "svg" {
			t.Fatalf("%s: root %q", f, root)
		}
	}
}
