package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Binary is the server the helper runs; TURNPIKE_REDIS_SERVER overrides it.
const Binary = "redis-server"

// SkipMessage is the reason a test is skipped without the server.
const SkipMessage = "redis-server not installed: apt-get install redis-server"

// startWait bounds the wait for a started server to answer, stopWait the
// wait for one told to stop.
const (
	startWait = 15 * time.Second
	stopWait  = 5 * time.Second
)

// Server is one running redis-server.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a redis-server for t and stops it when t ends; it skips t
// when the server is not installed. args are more server options
// ("--replicaof", host, port).
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := Launch(t.TempDir(), args...)
	if errors.Is(err, ErrNotInstalled) {
		t.Skip(SkipMessage)
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.t = t
	t.Cleanup(s.stop)
	return s
}

// ErrNotInstalled is Launch's error on a machine without redis-server.
var ErrNotInstalled = errors.New(SkipMessage)

// Launch runs a redis-server outside a test (turnpike bench does), with
// its files in dir, until Stop.
func Launch(dir string, args ...string) (*Server, error) {
	bin := os.Getenv("TURNPIKE_REDIS_SERVER")
	if bin == "" {
		bin = Binary
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, ErrNotInstalled
	}
	s := &Server{bin: path, dir: dir, args: args}
	// A free port can be taken by another process between the probe and
	// the server's bind; try a few.
	var lastErr error
	for range 5 {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		if lastErr = s.run(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Stop ends a server Launch started, as a test's cleanup ends Start's.
func (s *Server) Stop() { s.stop() }

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Kill ends the server with SIGKILL, as a crash would: nothing is flushed
// but what it had written before replying.
func (s *Server) Kill() {
	if s.t != nil {
		s.t.Helper()
	}
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts the server again on the same port and files, after Kill.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.run(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

func (s *Server) run() error {
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "yes",
		"--dir", s.dir,
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--save", "",
		// A primary stopping does not wait for its replicas to catch up.
		"--shutdown-timeout", "0",
		"--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	)
	cmd.Args = append(cmd.Args, s.args...)
	// Its own process group: a Ctrl-C of the test run reaches the test,
	// whose cleanup stops the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	exited := s.done
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(startWait)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("%s exited at start: %s", s.bin, s.logTail())
		default:
		}
		if ping(s.Addr()) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("%s did not answer on %s within %v: %s", s.bin, s.Addr(), startWait, s.logTail())
}

// stop ends the server with SIGTERM (it flushes and exits), or SIGKILL
// when it has not gone within stopWait. A SIGTERM that comes while a
// replica is busy finishing its first sync can go unheeded, so it is sent
// again every tenth of a second.
func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(stopWait)
	for {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
			s.cmd = nil
			return
		case <-tick.C:
		case <-deadline:
			s.Kill()
			return
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// StartCluster runs a one-node Redis Cluster holding every slot: the
// cluster protocol (MOVED, CROSSSLOT) with a single server. Its URL needs
// mode=cluster.
func StartCluster(t testing.TB) *Server {
	t.Helper()
	s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if err := command(s.Addr(), "CLUSTER ADDSLOTSRANGE 0 16383", "+OK"); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	deadline := time.Now().Add(startWait)
	for {
		err := command(s.Addr(), "CLUSTER INFO", "cluster_state:ok")
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not ready within %v: %v", startWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// command sends one inline command and checks that the reply contains
// want.
func command(addr, cmd, want string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !strings.Contains(string(buf[:n]), want) {
		return fmt.Errorf("%s: %q", cmd, buf[:n])
	}
	return nil
}

// ping sends PING in the inline protocol and waits for +PONG: a server
// still loading its AOF answers -LOADING instead.
func ping(addr string) error {
	return command(addr, "PING", "+PONG")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
