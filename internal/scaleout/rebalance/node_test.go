package rebalance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The scenario scripts in testdata/*.txt, in the manner of etcd raft's
// interaction tests: a line "> event" steps the node; the lines after it,
// up to the next "> " line, are the actions Ready must return, in order
// ("-" for none); "? p" lines check a partition's state ("? 4 serving@7"),
// "? gen" the running generation ("? gen 2 [4@7]", "? gen none"). Lines
// starting with # are comments. Events:
//
//	gained|revoking|lost|handed-back P@E
//	restored|serve-ended P@E [fenced|err]
//	gen-ended G [fenced=P@E,...] [err|retryable]
//	timer burst | timer retry|recheck P@E [owned] | timer standby-retry P
//	standbys P... | standbys -    (StandbySet)
//	standby-ended P               (with an error)
//
// "? standbys [P ...]" checks the partitions whose standby task runs.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			runScript(t, string(b))
		})
	}
}

func runScript(t *testing.T, script string) {
	t.Helper()
	n := NewNode()
	var got []string
	var want []string
	var at string
	flush := func() {
		if at == "" {
			return
		}
		if len(want) == 1 && want[0] == "-" {
			want = nil
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("after %q:\ngot actions:\n\t%s\nwant:\n\t%s", at, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
		at, got, want = "", nil, nil
	}
	for i, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "> "):
			flush()
			at = fmt.Sprintf("line %d: %s", i+1, line[2:])
			ev, err := parseEvent(line[2:])
			if err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			n.Step(ev)
			for _, a := range n.Ready() {
				got = append(got, a.String())
			}
		case strings.HasPrefix(line, "? "):
			flush()
			checkState(t, n, i+1, line[2:])
		default:
			if at == "" {
				t.Fatalf("line %d: an action without an event: %q", i+1, line)
			}
			want = append(want, line)
		}
	}
	flush()
}

func checkState(t *testing.T, n *Node, line int, q string) {
	t.Helper()
	f := strings.Fields(q)
	if f[0] == "standbys" {
		if got, w := fmt.Sprint(n.Standbys()), strings.Join(f[1:], " "); got != w {
			t.Errorf("line %d: standbys %s, want %s", line, got, w)
		}
		return
	}
	if f[0] == "gen" {
		id, parts := n.Generation()
		got := "none"
		if id != 0 {
			got = (Action{Kind: StartGeneration, Gen: id, Parts: parts}).String()[len("start-gen "):]
		}
		if w := strings.Join(f[1:], " "); got != w {
			t.Errorf("line %d: generation %s, want %s", line, got, w)
		}
		return
	}
	p, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil {
		t.Fatalf("line %d: %v", line, err)
	}
	st := n.Partition(uint32(p))
	if got := fmt.Sprintf("%s@%d", st.Phase, st.Epoch); got != f[1] {
		t.Errorf("line %d: partition %d is %s, want %s", line, p, got, f[1])
	}
}

func parsePE(s string) (uint32, Epoch, error) {
	ps, es, ok := strings.Cut(s, "@")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want P@E", s)
	}
	p, err := strconv.ParseUint(ps, 10, 32)
	if err != nil {
		return 0, 0, err
	}
	e, err := strconv.ParseUint(es, 10, 64)
	return uint32(p), Epoch(e), err
}

func parseEvent(s string) (Event, error) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return Event{}, fmt.Errorf("%q: too short", s)
	}
	kinds := map[string]EventKind{"gained": Gained, "revoking": Revoking, "lost": Lost, "handed-back": HandedBack,
		"restored": Restored, "serve-ended": ServeEnded}
	if k, ok := kinds[f[0]]; ok {
		p, e, err := parsePE(f[1])
		ev := Event{Kind: k, P: p, Epoch: e}
		for _, x := range f[2:] {
			switch x {
			case "fenced":
				ev.Fenced = true
			case "err":
				ev.Err = errors.New("broker unavailable")
			default:
				return ev, fmt.Errorf("%q: unknown %q", s, x)
			}
		}
		return ev, err
	}
	switch f[0] {
	case "standbys":
		ev := Event{Kind: StandbySet}
		for _, x := range f[1:] {
			if x == "-" {
				continue
			}
			p, err := strconv.ParseUint(x, 10, 32)
			if err != nil {
				return ev, err
			}
			ev.Standby = append(ev.Standby, uint32(p))
		}
		return ev, nil
	case "standby-ended":
		p, err := strconv.ParseUint(f[1], 10, 32)
		return Event{Kind: StandbyEnded, P: uint32(p), Err: errors.New("changelog unreachable")}, err
	case "gen-ended":
		g, err := strconv.ParseUint(f[1], 10, 64)
		ev := Event{Kind: GenerationEnded, Gen: g}
		for _, x := range f[2:] {
			switch {
			case strings.HasPrefix(x, "fenced="):
				for _, pe := range strings.Split(strings.TrimPrefix(x, "fenced="), ",") {
					p, e, err := parsePE(pe)
					if err != nil {
						return ev, err
					}
					ev.FencedParts = append(ev.FencedParts, PartitionEpoch{P: p, Epoch: e})
				}
			case x == "err":
				ev.Err = errors.New("disk full")
			case x == "retryable":
				ev.Err, ev.Retryable = errors.New("open partition: server unreachable"), true
			default:
				return ev, fmt.Errorf("%q: unknown %q", s, x)
			}
		}
		return ev, err
	case "timer":
		ev := Event{Kind: TimerFired}
		switch f[1] {
		case "burst":
			ev.Timer = Timer{Kind: Burst}
			return ev, nil
		case "standby-retry":
			p, err := strconv.ParseUint(f[2], 10, 32)
			ev.Timer = Timer{Kind: StandbyRetry, P: uint32(p)}
			return ev, err
		case "retry", "recheck":
			ev.Timer.Kind = Retry
			if f[1] == "recheck" {
				ev.Timer.Kind = Recheck
			}
			if len(f) < 3 {
				return ev, fmt.Errorf("%q: want a partition", s)
			}
			p, e, err := parsePE(f[2])
			ev.Timer.P, ev.Timer.Epoch = p, e
			ev.StillOwned = len(f) > 3 && f[3] == "owned"
			return ev, err
		}
	}
	return Event{}, fmt.Errorf("%q: unknown event", s)
}

// TestGenerationRetriesAreBounded: MaxGenerationRetries generations in a
// row that fail with a retryable error are started again; the next one
// fails the node.
func TestGenerationRetriesAreBounded(t *testing.T) {
	n := NewNode()
	n.Step(Event{Kind: Gained, P: 0, Epoch: 1})
	n.Step(Event{Kind: Restored, P: 0, Epoch: 1})
	n.Step(Event{Kind: TimerFired, Timer: Timer{Kind: Burst}})
	n.Ready()
	for i := 0; i <= MaxGenerationRetries; i++ {
		g, _ := n.Generation()
		if g == 0 {
			t.Fatalf("no generation after %d failures", i)
		}
		n.Step(Event{Kind: GenerationEnded, Gen: g, Err: errors.New("unreachable"), Retryable: true})
		acts := n.Ready()
		if i == MaxGenerationRetries {
			if len(acts) != 1 || acts[0].Kind != Fail {
				t.Fatalf("after %d retries: %v, want fail", i, acts)
			}
			return
		}
		if len(acts) != 1 || acts[0].Kind != SetTimer || acts[0].After != RetryAfter {
			t.Fatalf("failure %d: %v", i+1, acts)
		}
		n.Step(Event{Kind: TimerFired, Timer: Timer{Kind: Burst}})
		n.Ready()
	}
}
