package scenario

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
)

// ServeBrokerFlag is the runner's flag that makes it serve the embedded
// broker for a measurement in another process (-broker process):
// ServeBroker runs the broker, in memory, on a free local port, prints its
// address on one line of stdout and stops when stdin is closed.
const ServeBrokerFlag = "serve-broker"

// ServeBroker is the body of the runner's -serve-broker mode (see
// ServeBrokerFlag).
func ServeBroker(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	srv, err := iggytest.NewServer(iggytest.WithLogger(quietLogger()))
	if err != nil {
		return fmt.Errorf("serve broker: %w", err)
	}
	defer srv.Close()
	if _, err := fmt.Fprintln(stdout, srv.Addr()); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// brokerProcess is the broker of -broker process: this executable run
// with -serve-broker.
type brokerProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startBrokerProcess starts the broker process and returns it with its
// address.
func startBrokerProcess(ctx context.Context) (*brokerProcess, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.CommandContext(ctx, exe, "-"+ServeBrokerFlag)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start broker process: %w", err)
	}
	p := &brokerProcess{cmd: cmd, stdin: stdin}
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case a := <-addr:
		if a == "" {
			p.close()
			return nil, "", fmt.Errorf("broker process %s gave no address", exe)
		}
		return p, a, nil
	case <-time.After(30 * time.Second):
		p.close()
		return nil, "", fmt.Errorf("broker process %s: no address after 30 s", exe)
	}
}

// close stops the broker process and waits for it.
func (p *brokerProcess) close() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
