package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

const (
	readyTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
)

// child is a server process the bench started: the real server or the
// null server. The bench owns it and must stop it on every exit path.
type child struct {
	name    string
	cmd     *exec.Cmd
	addr    string
	logPath string
	exited  chan struct{}
	waitErr error
	https   bool // serves TLS (servesTLS)
}

// freeAddr picks a free loopback port, never one it picked for the last
// recentAddrs calls: the kernel hands a port just closed out again, and
// a server given two picks in a row (--addr and --grpc-addr) was once
// given the same port twice, and failed to start. Another process could
// still take a port before the child binds it; the child then fails to
// start and says so.
func freeAddr() (string, error) {
	picked.Lock()
	defer picked.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := ln.Addr().String()
		ln.Close()
		if !slices.Contains(picked.recent[:], addr) {
			picked.recent[picked.next%recentAddrs] = addr
			picked.next++
			return addr, nil
		}
	}
	return "", errors.New("no loopback port free that was not just picked")
}

// recentAddrs is how many of its last picks freeAddr avoids.
const recentAddrs = 64

var picked struct {
	sync.Mutex
	recent [recentAddrs]string
	next   int
}

// startChild runs exe with args (which must already contain addr), its
// output appended to logPath, in env (nil: childEnv()), on cpus (nil:
// wherever the bench may run).
func startChild(name, exe string, args []string, addr, logPath string, env []string, cpus []int) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "--- %s: %s %s\n", time.Now().Format(time.RFC3339), exe, strings.Join(args, " "))
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	if env == nil {
		cmd.Env = childEnv()
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the bench dies without cleaning up (SIGKILL), the kernel kills the
	// child instead of leaving a server holding the machine's cores.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startPinned(cmd, cpus); err != nil {
		return nil, err
	}
	c := &child{name: name, cmd: cmd, addr: addr, logPath: logPath, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// childEnv is the caller's environment without its SURGE_* variables:
// the bench says with flags what it measures; a SURGE_* variable of the
// caller's shell (SURGE_KAFKA would turn the embedded server into a
// cluster node) must not change the server under test.
func childEnv() []string {
	return withoutPrefix(os.Environ(), "SURGE_")
}

// withoutPrefix is env without the variables whose name starts with
// prefix; never nil, which exec.Cmd would take for the whole environment.
func withoutPrefix(env []string, prefix string) []string {
	out := []string{}
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

func (c *child) baseURL() string {
	if c.https {
		return "https://" + c.addr
	}
	return "http://" + c.addr
}

// waitReady polls /v1/health_check until it answers 200 and returns how
// long that took from the call.
func (c *child) waitReady(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	client := oneOffClient(ctx, time.Second)
	defer client.CloseIdleConnections()
	url := c.baseURL() + "/v1/health_check"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
		}
		select {
		case <-c.exited:
			return 0, fmt.Errorf("%s exited before it was ready (%v); its log: %s", c.name, c.waitErr, c.logPath)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Since(start) > readyTimeout {
			return 0, fmt.Errorf("%s not ready after %s; its log: %s", c.name, readyTimeout, c.logPath)
		}
	}
}

// cpuSeconds is the child's user+system CPU time so far.
func (c *child) cpuSeconds() (float64, error) { return procCPUSeconds(c.cmd.Process.Pid) }

// memory returns the child's peak resident memory (VmHWM) and its
// resident memory now (VmRSS), in bytes.
func (c *child) memory() (peak, now int64, err error) { return procMemory(c.cmd.Process.Pid) }

// procCPUSeconds is a process's user+system CPU time so far, all its
// threads included.
func procCPUSeconds(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

// procMemory returns a process's peak resident memory (VmHWM) and its
// resident memory now (VmRSS), in bytes.
func procMemory(pid int) (peak, now int64, err error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	if st.VmHWM == 0 {
		return 0, 0, errors.New("/proc status has no VmHWM")
	}
	return int64(st.VmHWM), int64(st.VmRSS), nil
}

// stop sends SIGTERM and waits for a graceful exit, killing the child if it
// takes longer than stopTimeout. It returns the exit error (nil for exit 0).
func (c *child) stop() error {
	select {
	case <-c.exited:
		return c.waitErr
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return c.waitErr
	case <-time.After(stopTimeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", c.name, stopTimeout)
	}
}

// kill ends the child at once if it still runs; it is the cleanup path.
func (c *child) kill() {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}
