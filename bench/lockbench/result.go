package lockbench

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Result is one line of output, in the format of WORKLOADS.md. Figures that
// the format has no field for are written into Notes as key=value words.
type Result struct {
	System    string  `json:"system"`
	Workload  string  `json:"workload"`
	Workers   int     `json:"workers"`
	DurationS float64 `json:"duration_s"`
	Ops       int     `json:"ops"`
	OpsPerS   float64 `json:"ops_per_s"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	P999      float64 `json:"p999_ms"`
	Max       float64 `json:"max_ms"`
	Errors    int     `json:"errors"`
	Notes     string  `json:"notes"`
}

// JSON returns the result as one line of JSON.
func (r Result) JSON() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a struct of numbers and strings always marshals
	}
	return string(b)
}

// Parse reads a line printed by JSON.
func Parse(line string) (Result, error) {
	var r Result
	err := json.Unmarshal([]byte(line), &r)
	return r, err
}

var noteRE = regexp.MustCompile(`([a-z0-9_]+)=(-?[0-9.]+)`)

// Note returns the numeric figure key=value from Notes.
func (r Result) Note(key string) (float64, bool) {
	for _, m := range noteRE.FindAllStringSubmatch(r.Notes, -1) {
		if m[1] == key {
			v, err := strconv.ParseFloat(m[2], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// addNote appends key=value to the notes.
func (r *Result) addNote(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if r.Notes == "" {
		r.Notes = s
	} else {
		r.Notes += " " + s
	}
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// Headline returns the figures the targets are stated in, per workload,
// with whether higher is better: they are what a ratio compares.
func Headline(r Result) map[string]float64 {
	h := map[string]float64{}
	switch r.Workload {
	case "W1", W1Leader, W1Follower:
		h["pairs_per_s"] = r.OpsPerS
		h["acquire_p50_ms"] = r.P50
		h["acquire_p99_ms"] = r.P99
	case "W2":
		h["pairs_per_s"] = r.OpsPerS
		h["acquire_p50_ms"] = r.P50
		h["acquire_p99_ms"] = r.P99
	case "W3":
		h["grants_per_s"] = r.OpsPerS
		h["wait_p50_ms"] = r.P50
		h["wait_p99_ms"] = r.P99
	case "W4":
		if v, ok := r.Note("unavailable_ms"); ok {
			h["unavailable_ms"] = v
		}
	case "W5":
		if v, ok := r.Note("overhead_ms"); ok {
			h["overhead_ms"] = v
		}
	case "W11":
		for _, k := range []string{"total_excess_ms", "longest_excess_ms", "failed_acquires", "locks_lost"} {
			if v, ok := r.Note(k); ok {
				h[k] = v
			}
		}
	case "W12":
		for _, k := range w12Headline {
			if v, ok := r.Note(k); ok {
				h[k] = v
			}
		}
	case "W7":
		for _, k := range []string{"read_ops_per_s", "write_ops_per_s", "read_p50_ms", "read_p99_ms", "write_p50_ms", "write_p99_ms"} {
			if v, ok := r.Note(k); ok {
				h[k] = v
			}
		}
	case "W8":
		h["grants_per_s"] = r.OpsPerS
		h["wait_p50_ms"] = r.P50
		h["wait_p99_ms"] = r.P99
		if v, ok := r.Note("max_holders"); ok {
			h["max_holders"] = v
		}
	}
	return h
}

// Ratio is the final comparison line of a workload: fencelock's headline
// figures divided by the peer's, medians over the runs.
type Ratio struct {
	System   string             `json:"system"`
	Workload string             `json:"workload"`
	Runs     int                `json:"runs"`
	Ratios   map[string]float64 `json:"fencelock_over_peer"`
	Ours     map[string]float64 `json:"fencelock_median"`
	Theirs   map[string]float64 `json:"peer_median"`
}

// Compare computes the ratio line of one workload from paired runs.
func Compare(peer, workload string, ours, theirs []Result) Ratio {
	r := Ratio{System: "fencelock/" + peer, Workload: workload, Runs: len(ours),
		Ratios: map[string]float64{}, Ours: medianHeadline(ours), Theirs: medianHeadline(theirs)}
	keys := make([]string, 0, len(r.Ours))
	for k := range r.Ours {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if t, ok := r.Theirs[k]; ok && t != 0 {
			r.Ratios[k] = math.Round(r.Ours[k]/t*1000) / 1000
		}
	}
	return r
}

func medianHeadline(rs []Result) map[string]float64 {
	all := map[string][]float64{}
	for _, r := range rs {
		for k, v := range Headline(r) {
			all[k] = append(all[k], v)
		}
	}
	out := map[string]float64{}
	for k, vs := range all {
		out[k] = Median(vs)
	}
	return out
}

// JSON returns the ratio as one line of JSON.
func (r Ratio) JSON() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// ParseWorkloads turns "all" or "W1,W3" into workload IDs of all, in the
// order given (case does not matter). "W1" stands for both its placements,
// W1-leader and W1-follower, where all has them.
func ParseWorkloads(s string, all []string) ([]string, error) {
	if s == "" || s == "all" {
		return all, nil
	}
	var out []string
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(w)
		names := []string{w}
		if exp, ok := aliases[strings.ToUpper(w)]; ok && !slices.ContainsFunc(all, func(a string) bool { return strings.EqualFold(a, w) }) {
			names = exp
		}
		for _, name := range names {
			i := slices.IndexFunc(all, func(a string) bool { return strings.EqualFold(a, name) })
			if i < 0 {
				return nil, fmt.Errorf("unknown workload %q (have %s)", w, strings.Join(all, ","))
			}
			out = append(out, all[i])
		}
	}
	return out, nil
}
