// Package sysstat reads what the benchmark runner reports about the
// machine and the process: peak resident memory and the load average.
package sysstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PeakRSS returns the process's peak resident set size in bytes (VmHWM of
// /proc/self/status), or 0 where /proc is not available.
func PeakRSS() int64 {
	return statusKB("VmHWM:") * 1024
}

// RSS returns the current resident set size in bytes (VmRSS), or 0.
func RSS() int64 {
	return statusKB("VmRSS:") * 1024
}

func statusKB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, field) {
			continue
		}
		fs := strings.Fields(line[len(field):])
		if len(fs) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		return n
	}
	return 0
}

// Load returns the 1-, 5- and 15-minute load averages as /proc/loadavg
// gives them ("5.53 5.24 3.08"), or "n/a".
func Load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	fs := bytes.Fields(b)
	if len(fs) < 3 {
		return "n/a"
	}
	return string(bytes.Join(fs[:3], []byte(" ")))
}

// Machine describes the CPU count, OS and architecture, and the CPU model
// when /proc/cpuinfo names it.
func Machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				if i := strings.IndexByte(line, ':'); i >= 0 {
					model = strings.TrimSpace(line[i+1:])
				}
				break
			}
		}
	}
	s := fmt.Sprintf("%d CPUs (GOMAXPROCS %d), %s/%s, %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	if model != "" {
		s = model + ", " + s
	}
	return s
}

// ResetPeakRSS resets the peak resident set size (VmHWM) to the current
// one, so that PeakRSS measures what follows (Linux 4.0+: "5" written to
// /proc/self/clear_refs). It reports whether the reset worked.
func ResetPeakRSS() bool {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return false
	}
	return true
}

// CPUTime returns the user plus system CPU time the process has used.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
