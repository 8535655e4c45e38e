package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// A full run with debug logs, poison records among the events and a
// distinctive password: no log line carries the password or a payload
// byte, every line of the library follows the message convention
// ("<component>: <message>") and names its error "err"; /metrics serves
// the App's metrics in Prometheus format. 8,000 events (20,000 with
// STRAND_SOAK=1): the test runs alone (see TestMain), so its length is
// the package's.
func TestLogsCarryNoSecretsOrPayloads(t *testing.T) {
	const password = "Pa55-w0rd-never-logged"
	var out, logs syncBuffer
	args := []string{"-events", fmt.Sprint(soakSize(8000, 20000)), "-partitions", "4", "-poison", "12", "-data", t.TempDir(),
		"-http", "127.0.0.1:0", "-progress", "100ms", "-v", "-user", "strand-test", "-password", password}
	cfg, err := parseFlags(args, &logs)
	if err != nil {
		t.Fatal(err)
	}
	a := newApp(cfg, &out, &logs)
	var metrics string
	a.caughtUp = func(a *app) {
		resp, err := http.Get("http://" + a.httpAddr + "/metrics")
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		metrics = string(b)
	}
	if _, err := a.run(context.Background()); err != nil {
		t.Logf("logs:\n%s", tail(logs.String(), 40))
		t.Fatal(err)
	}
	text := logs.String()
	if !strings.Contains(text, "dead letter") {
		t.Fatalf("the run logged no dead letter; the test would prove nothing:\n%s", tail(text, 20))
	}
	for _, leak := range []string{password, "poison-", "\xff", "ÿ", `"account"`, `"amount"`, `"owner"`} {
		if strings.Contains(text, leak) {
			for _, l := range strings.Split(text, "\n") {
				if strings.Contains(l, leak) {
					t.Errorf("log line carries %q: %s", leak, l)
					break
				}
			}
		}
	}
	convention := regexp.MustCompile(`msg="?(strand|state|pebble|iggy|iggytest): `)
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, " error=") {
			t.Errorf("log line names its error \"error\", not \"err\": %s", l)
		}
		if strings.Contains(l, "component=strand/") && !convention.MatchString(l) {
			t.Errorf("library log line does not follow \"<component>: <message>\": %s", l)
		}
	}
	for _, want := range []string{"strand_events_applied", "messaging_process_duration_seconds", "strand_lag", "messaging_client_consumed_messages", `strand_dead_letter_reason="bad-headers"`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
