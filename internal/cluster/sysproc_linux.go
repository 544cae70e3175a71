// This file holds the Linux process groups: a child's group, dying with us (Pdeathsig).

package cluster

import (
	"os"
	"syscall"
)

// sysProcAttr puts the child in a process group of its own, so that a stop
// reaches whatever it spawned, and has the kernel kill it if we die first
// (even by SIGKILL, when no cleanup of ours can run).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalGroup(p *os.Process, sig syscall.Signal) {
	// The group id is the leader's pid (Setpgid with Pgid 0).
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig) // the group is gone; the leader may still be there
	}
}

func killGroup(p *os.Process, sig syscall.Signal) { _ = syscall.Kill(-p.Pid, sig) }
