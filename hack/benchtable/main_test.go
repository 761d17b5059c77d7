package main

import (
	"strings"
	"testing"
)

func TestParsePairsFiguresWithFloorsAndTargets(t *testing.T) {
	t.Parallel()
	out := `goos: linux
pkg: example
BenchmarkFigureIdlePoll-2   	1	100 ns/op	3 runs	4 cpu-ms/poll	40 cpu-ms/poll-floor	20 cpu-ms/poll-target	1 conditional-req/poll
BenchmarkFigureIdlePoll-2   	1	100 ns/op	3 runs	6 cpu-ms/poll	44 cpu-ms/poll-floor	22 cpu-ms/poll-target	1 conditional-req/poll
BenchmarkFigureIdlePoll-2   	1	100 ns/op	3 runs	5 cpu-ms/poll	42 cpu-ms/poll-floor	21 cpu-ms/poll-target	1 conditional-req/poll
BenchmarkFigureRollout/max_unavailable=1-2 	1	100 ns/op	15 wall-s/upgrade	6 wall-s/upgrade-floor	7.2 wall-s/upgrade-target
PASS
`
	figs, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 3 {
		t.Fatalf("%d figures: %+v", len(figs), figs)
	}
	cpu := figs[0]
	if cpu.Name != "IdlePoll cpu" || cpu.Unit != "ms/poll" || cpu.Value != 5 || *cpu.Floor != 42 || *cpu.Target != 21 || !*cpu.OK || cpu.Runs != 9 {
		t.Errorf("cpu figure %+v (floor %v, target %v)", cpu, *cpu.Floor, *cpu.Target)
	}
	if r := *cpu.Ratio; r < 0.119 || r > 0.120 {
		t.Errorf("cpu ratio %v, want 5/42", r)
	}
	if c := figs[1]; c.Name != "IdlePoll conditional" || c.Floor != nil || c.Ratio != nil || c.Target != nil {
		t.Errorf("a figure without a floor: %+v", c)
	}
	roll := figs[2]
	if roll.Name != "Rollout/max_unavailable=1 wall" || roll.Runs != 1 || *roll.OK {
		t.Errorf("rollout figure %+v: want its name with the case, one run, the target missed", roll)
	}
}

func TestZeroFloorHasNoRatio(t *testing.T) {
	t.Parallel()
	figs, err := parse(strings.NewReader("BenchmarkFigureX-2 1 1 ns/op 0 charged-req/poll 0 charged-req/poll-floor 0 charged-req/poll-target\n"))
	if err != nil || len(figs) != 1 {
		t.Fatalf("%v %+v", err, figs)
	}
	if f := figs[0]; f.Ratio != nil || !*f.OK {
		t.Errorf("%+v: want no ratio and the target met", f)
	}
}

func TestUnitsKeepTheirScale(t *testing.T) {
	t.Parallel()
	figs, err := parse(strings.NewReader("BenchmarkFigureAgentMemory-2 1 1 ns/op 60 runs 88.5 rss-MB 67.7 rss-MB-floor 150 rss-MB-target\n"))
	if err != nil || len(figs) != 1 {
		t.Fatalf("%v %+v", err, figs)
	}
	if f := figs[0]; f.Unit != "MB" || f.Value != 88.5 || *f.Floor != 67.7 || *f.Target != 150 || f.Runs != 60 {
		t.Errorf("%+v: want the values in MB as reported", f)
	}
}

func TestSkippedFiguresAreNamed(t *testing.T) {
	t.Parallel()
	out := `goos: linux
--- SKIP: BenchmarkFigureIdlePollReplicas
    realkube.go:49: set TALOSLAB_KUBE_APISERVER ...
--- SKIP: BenchmarkOther
BenchmarkFigureIdlePoll-2   	1	100 ns/op	4 cpu-ms/poll
`
	got := skippedFigures(out)
	if len(got) != 1 || got[0] != "BenchmarkFigureIdlePollReplicas" {
		t.Fatalf("skipped figures %q, want only BenchmarkFigureIdlePollReplicas", got)
	}
	if got := skippedFigures("BenchmarkFigureIdlePoll-2 1 100 ns/op\nPASS\n"); len(got) != 0 {
		t.Fatalf("skipped figures %q in a run that skipped none", got)
	}
}

func TestAFigureHasOneUnit(t *testing.T) {
	t.Parallel()
	out := "BenchmarkFigureDriftSweep-2 \t1\t100 ns/op\t32 cpu-s/sweep\t30 cpu-ms/cluster\n"
	if _, err := parse(strings.NewReader(out)); err == nil || !strings.Contains(err.Error(), "one unit") {
		t.Fatalf("two units of one figure were taken: %v", err)
	}
}
