// This file holds process stops where there are no process groups: the child is killed.

//go:build !unix

package cluster

import (
	"os"
	"syscall"
)

// Without process groups and SIGTERM, a stop can only kill the child.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, _ syscall.Signal) { _ = p.Kill() }

func killGroup(p *os.Process, _ syscall.Signal) { _ = p.Kill() }
