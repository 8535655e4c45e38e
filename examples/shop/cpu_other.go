//go:build !unix

package main

import "time"

// cpuTime returns 0: the platform does not tell the process's CPU time.
func cpuTime() time.Duration { return 0 }
