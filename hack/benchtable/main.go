// Command benchtable runs the benchmarks that carry figures and prints
// each figure beside its floor, as `make bench` does:
//
//	go run ./hack/benchtable [-count N] [-bench REGEXP] [-o bench.json] [packages]
//
// A benchmark states a figure with testing.B.ReportMetric: the value in a
// unit named "<figure>-<unit>" (such as "cpu-ms/poll"), its floor in the
// same unit with "-floor" appended ("cpu-ms/poll-floor"), and optionally
// its target, the most the value may be, with "-target"; a metric "runs"
// says how many samples each of its values stands for. Every benchmark
// runs once per count (-benchtime 1x: each one repeats what it measures
// itself and reports the median); a figure's value, floor and target are
// the medians over the counts, and its ratio is the value over the floor. The table goes to
// standard output and the same figures, as a JSON array of {name, value,
// unit, floor, ratio, target, ok, runs}, to -o, so that a regression is a
// diff.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"

	"golang.org/x/perf/benchfmt"
)

// figurePackages are the packages whose benchmarks carry figures.
var figurePackages = []string{"./cmd/taloscluster/", "./providers/proxmox/"}

// Figure is one figure of the table and of bench.json.
type Figure struct {
	Name  string   `json:"name"`
	Value float64  `json:"value"`
	Unit  string   `json:"unit"`
	Floor *float64 `json:"floor"`
	Ratio *float64 `json:"ratio"`
	// Target is the most the value may be, in its unit; OK says whether
	// it is met. Both are absent without a target.
	Target *float64 `json:"target,omitempty"`
	OK     *bool    `json:"ok,omitempty"`
	Runs   int      `json:"runs"`
}

func main() {
	count := flag.Int("count", 1, "runs of each benchmark; the figures are their medians")
	bench := flag.String("bench", "Figure", "regular expression of the benchmarks to run")
	out := flag.String("o", "bench.json", "file the figures are written to as JSON")
	flag.Parse()
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = figurePackages
	}
	args := append([]string{"test", "-run", "^$", "-bench", *bench, "-benchtime", "1x", "-count", fmt.Sprint(*count), "-timeout", "30m"}, pkgs...)
	cmd := exec.Command("go", args...)
	var output bytes.Buffer
	cmd.Stdout = io.MultiWriter(&output, os.Stderr)
	cmd.Stderr = os.Stderr
	fmt.Fprintf(os.Stderr, "go %s\n", strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		fail(fmt.Errorf("running the benchmarks: %w", err))
	}
	if skipped := skippedFigures(output.String()); len(skipped) > 0 {
		fail(fmt.Errorf("%s skipped, so the table would lack their figures (see their reason above)", strings.Join(skipped, ", ")))
	}
	figures, err := parse(&output)
	if err != nil {
		fail(err)
	}
	if len(figures) == 0 {
		fail(errors.New("no benchmark reported a figure"))
	}
	print(os.Stdout, figures)
	data, err := json.MarshalIndent(figures, "", "  ")
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "benchtable: %v\n", err)
	os.Exit(1)
}

// skippedFigures returns the figure benchmarks that `go test` output says
// were skipped ("--- SKIP: BenchmarkFigure…").
func skippedFigures(output string) []string {
	var out []string
	for _, line := range strings.Split(output, "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- SKIP: "); ok && strings.HasPrefix(name, "BenchmarkFigure") {
			out = append(out, strings.Fields(name)[0])
		}
	}
	return out
}

// parse reads `go test -bench` output and returns its figures, in the
// order they first appear.
func parse(r io.Reader) ([]Figure, error) {
	type series struct {
		values, floors, targets []float64
		runs                    int
	}
	var order []string
	all := map[string]*series{}
	units := map[string]string{}
	rd := benchfmt.NewReader(bufio.NewReader(r), "bench output")
	for rd.Scan() {
		res, ok := rd.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		base, parts := res.Name.Parts()
		name := strings.TrimPrefix(strings.TrimPrefix(string(base), "Benchmark"), "Figure")
		for _, p := range parts {
			if !strings.HasPrefix(string(p), "-") { // not GOMAXPROCS
				name += string(p)
			}
		}
		runs := 1
		for _, v := range res.Values {
			if v.Unit == "runs" {
				runs = int(v.Value)
			}
		}
		for _, v := range res.Values {
			// benchfmt scales some units (MB to bytes); a figure keeps
			// the unit and value its benchmark reported.
			unit, value, kind := v.OrigUnit, v.OrigValue, "value"
			if unit == "" {
				unit, value = v.Unit, v.Value
			}
			for _, suffix := range []string{"-floor", "-target"} {
				if u, ok := strings.CutSuffix(unit, suffix); ok {
					unit, kind = u, suffix
				}
			}
			figure, metricUnit, ok := strings.Cut(unit, "-")
			if !ok || unit == "ns/op" || unit == "B/op" || unit == "allocs/op" {
				continue
			}
			key := name + " " + figure
			s := all[key]
			if s == nil {
				s = &series{}
				all[key] = s
				order = append(order, key)
				units[key] = metricUnit
			} else if units[key] != metricUnit {
				return nil, fmt.Errorf("figure %q is reported in %s and in %s: a figure has one unit", key, units[key], metricUnit)
			}
			switch kind {
			case "-floor":
				s.floors = append(s.floors, value)
			case "-target":
				s.targets = append(s.targets, value)
			default:
				s.values = append(s.values, value)
				s.runs += runs
			}
		}
	}
	if err := rd.Err(); err != nil {
		return nil, fmt.Errorf("reading the benchmark output: %w", err)
	}
	var out []Figure
	for _, key := range order {
		s := all[key]
		if len(s.values) == 0 {
			continue
		}
		f := Figure{Name: key, Value: median(s.values), Unit: units[key], Runs: s.runs}
		if len(s.floors) > 0 {
			floor := median(s.floors)
			f.Floor = &floor
			if floor != 0 {
				ratio := f.Value / floor
				f.Ratio = &ratio
			}
		}
		if len(s.targets) > 0 {
			target := median(s.targets)
			ok := f.Value <= target
			f.Target, f.OK = &target, &ok
		}
		out = append(out, f)
	}
	return out, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// print writes the table.
func print(w io.Writer, figures []Figure) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tvalue\tunit\tfloor\tratio\ttarget\tverdict\truns\t")
	for _, f := range figures {
		floor, ratio, target, verdict := "-", "-", "-", ""
		if f.Floor != nil {
			floor = num(*f.Floor)
		}
		if f.Ratio != nil {
			ratio = fmt.Sprintf("%.2fx", *f.Ratio)
		}
		if f.Target != nil {
			target = num(*f.Target)
			verdict = "met"
			if !*f.OK {
				verdict = "MISSED"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", f.Name, num(f.Value), f.Unit, floor, ratio, target, verdict, f.Runs)
	}
	_ = tw.Flush()
}

// num formats a figure with three significant digits.
func num(x float64) string {
	if x == 0 || math.Abs(x) >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.3g", x)
}
