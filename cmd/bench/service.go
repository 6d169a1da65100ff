package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// service is the api command running as a child process.
type service struct {
	base    string // http://127.0.0.1:port
	cmd     *exec.Cmd
	tmpDir  string
	logPath string
	exited  chan struct{}
	waitErr error
	log     *log.Logger

	stopOnce sync.Once
	stopErr  error
}

// startService builds ./cmd/api with the build tags (unless bin is given) and starts it
// against dsn on a free local port, with the background sweep pushed out to an hour so that
// it cannot land inside a measurement, and env (NAME=value) added to its environment; it
// returns once /readyz answers 200.
func startService(ctx context.Context, bin, tags, dsn string, logger *log.Logger, env ...string) (*service, error) {
	tmp, err := os.MkdirTemp("", "bench-api-")
	if err != nil {
		return nil, err
	}
	s := &service{tmpDir: tmp, log: logger, exited: make(chan struct{}), logPath: filepath.Join(tmp, "api.log")}
	if bin == "" {
		if bin, err = buildAPI(ctx, tmp, logger, tags); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
	}
	addr, err := freeAddr()
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	s.base = "http://" + addr
	// A clean environment: an API_TOKEN or DB_MAX_CONNS of the caller's must not change what
	// is measured. The service's defaults (pool of 20, statement timeout) are what ships.
	s.cmd = exec.Command(bin)
	s.cmd.Env = append([]string{"DATABASE_URL=" + dsn, "HTTP_ADDR=" + addr, "SWEEP_INTERVAL=1h", "PATH=" + os.Getenv("PATH")}, env...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = childProcAttr()
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	if err := s.waitReady(ctx); err != nil {
		return nil, errors.Join(err, s.stop())
	}
	logger.Printf("service pid %d listening on %s", s.cmd.Process.Pid, addr)
	return s, nil
}

// buildAPI compiles ./cmd/api of the module this command belongs to.
func buildAPI(ctx context.Context, dir string, logger *log.Logger, tags string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run bench from inside the module (or pass -api-bin)")
	}
	bin := filepath.Join(dir, "api")
	logger.Printf("building ./cmd/api (tags %q)", tags)
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", tags, "-o", bin, "./cmd/api")
	cmd.Dir = filepath.Dir(gomod)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/api: %w\n%s", err, stderr.String())
	}
	return bin, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (s *service) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.exited:
			return fmt.Errorf("the service exited at start (%v); its log:\n%s", s.waitErr, s.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("the service was not ready within 90 s; its log:\n%s", s.logTail())
}

// stop sends SIGTERM (the service drains and exits 0), kills it after 30 s, and removes the
// temporary directory. It is idempotent.
func (s *service) stop() error {
	s.stopOnce.Do(func() {
		defer os.RemoveAll(s.tmpDir)
		if s.cmd == nil || s.cmd.Process == nil {
			return
		}
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
			s.stopErr = errors.New("the service did not stop within 30 s of SIGTERM; killed")
			return
		}
		if s.waitErr != nil {
			s.stopErr = fmt.Errorf("the service exited with %v; its log:\n%s", s.waitErr, s.logTail())
		}
	})
	return s.stopErr
}

// logTail returns the last lines of the service's log for error messages.
func (s *service) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// memory is a reading of the child's /proc/<pid>/status, in bytes.
type memory struct{ rss, hwm int64 }

func (s *service) memory() (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return memory{}, err
	}
	defer f.Close()
	var m memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("parse %s %q: %w", k, v, err)
		}
		if k == "VmRSS" {
			m.rss = kb << 10
		} else {
			m.hwm = kb << 10
		}
	}
	if m.rss == 0 || m.hwm == 0 {
		return memory{}, errors.New("no VmRSS/VmHWM in /proc/<pid>/status")
	}
	return m, sc.Err()
}

// resetPeak makes VmHWM start again from the current RSS (Linux ≥ 4.0, clear_refs value 5),
// so that the next reading is the peak of what happens from now on.
func (s *service) resetPeak() error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", s.cmd.Process.Pid), []byte("5"), 0)
}

// cpu returns the CPU time (user + system) the service has used so far, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func (s *service) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its ")" do not.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, errors.New("unexpected /proc/<pid>/stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// selfCPU returns the CPU time this process (the load generator) has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
