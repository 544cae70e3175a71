// This file holds the process groups of Unix systems other than Linux.

//go:build unix && !linux

package cluster

import (
	"os"
	"syscall"
)

// sysProcAttr puts the child in a process group of its own, so that a stop
// reaches whatever it spawned. Only Linux can tie the child's life to ours.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(p *os.Process, sig syscall.Signal) {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}

func killGroup(p *os.Process, sig syscall.Signal) { _ = syscall.Kill(-p.Pid, sig) }
