// This file holds one child process: its start, log file, stop by process group, log tail.

package cluster

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// tailBytes bounds the log tail quoted in errors.
const tailBytes = 3000

// proc is one child process with its log file.
type proc struct {
	name    string
	args    []string
	logPath string
	logFrom int64 // where this run's output starts in a reused log
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // valid after done
	stopped bool          // Stop signalled it: an exit is expected
	killed  bool          // it outlived the grace period
}

// startProc runs bin with args, its stdout and stderr appended to
// dir/name.log.
func startProc(bin, dir, name string, args []string) (*proc, error) {
	path := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: log of %s: %w", name, err)
	}
	from, _ := f.Seek(0, io.SeekEnd)
	fmt.Fprintf(f, "# %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("cluster: start %s (%s): %w", name, bin, err)
	}
	p := &proc{name: name, args: args, logPath: path, logFrom: from, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the child's process id.
func (p *proc) PID() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process group to end, and kills it after grace. It returns
// an error when the process did not end cleanly on its own.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		killGroup(p.cmd.Process, syscall.SIGKILL) // stragglers of a dead leader
		if p.stopped {
			return nil
		}
		return p.failure("exited before the cluster stopped")
	}
	p.stopped = true
	signalGroup(p.cmd.Process, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.killed = true
		// A Go process prints every goroutine's stack on SIGQUIT: the
		// log then shows what it was waiting for.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(time.Second):
		}
		killGroup(p.cmd.Process, syscall.SIGKILL)
		<-p.done
	}
	killGroup(p.cmd.Process, syscall.SIGKILL)
	if p.killed {
		return fmt.Errorf("cluster: %s did not stop within %v of SIGTERM and was killed (its goroutines are in the log); log %s", p.name, grace, p.logPath)
	}
	if p.waitErr != nil {
		return p.failure("stopped with an error")
	}
	return nil
}

// failure describes an unexpected exit with the tail of the log.
func (p *proc) failure(what string) error {
	status := "still running"
	if p.exited() {
		status = "exit status 0"
		if p.waitErr != nil {
			status = p.waitErr.Error()
		}
	}
	return fmt.Errorf("cluster: %s %s (%s); log %s:\n%s", p.name, what, status, p.logPath, p.tail())
}

// tail is the end of the process's log, cut at a line start.
func (p *proc) tail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	off := max(st.Size()-tailBytes, p.logFrom)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	if off > p.logFrom {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return indent(string(bytes.TrimRight(b, "\n")))
}

func indent(s string) string {
	if s == "" {
		return "    (empty)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// logSays reports whether this run of the process logged s.
func (p *proc) logSays(s string) bool {
	b, err := os.ReadFile(p.logPath)
	return err == nil && int64(len(b)) >= p.logFrom && bytes.Contains(b[p.logFrom:], []byte(s))
}
