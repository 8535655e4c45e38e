package main

import (
	"net"
	"testing"
	"time"
)

// TestSurvivesItsStderrReaderGoingAway runs the command as a process whose
// stderr is a pipe nobody reads any more, with per-connection logging on:
// before SIGPIPE was ignored, the first log line after the reader closed
// killed the broker (exit by signal 13).
func TestSurvivesItsStderrReaderGoingAway(t *testing.T) {
	addr := freeAddr(t)
	cmd := brokerCommand(t, "-addr", addr, "-v")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var werr error
	go func() { werr = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	waitServing(t, addr, 30*time.Second, "broker")
	stderr.Close()
	for i := 0; i < 20; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			select {
			case <-exited:
				t.Fatalf("broker exited after its stderr reader went away: %v", werr)
			default:
			}
			t.Fatalf("dial %d: %v", i, err)
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-exited:
		t.Fatalf("broker exited: %v", werr)
	case <-time.After(100 * time.Millisecond):
	}
}
