package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lockData takes an exclusive flock on <dir>/.lock and writes this
// process's pid into it, so that a second `gpuq dev` on the same data
// directory stops at once and says which process holds it. The lock goes
// with the process (closing the file, or dying); the file stays.
func lockData(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(b))
			if pid == "" {
				pid = "unknown"
			}
			return nil, fmt.Errorf("data directory %s is in use by another gpuq dev (pid %s); stop it, or give this one another --data", dir, pid)
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return func() { f.Close() }, nil
}

// checkPort fails at once when the NATS client port is taken, instead of
// the embedded server waiting 30 s for a listener that never comes.
func checkPort(port int) error {
	if port == 0 {
		port = 4222 // nats-server's default for 0
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("NATS port %d is already in use; stop what listens there, or pick another with --nats-port", port)
		}
		return fmt.Errorf("NATS port %d: %w", port, err)
	}
	return ln.Close()
}

// checkHTTP fails at once, naming the address, when --http cannot be
// listened on (in use, or not an address of this host).
func checkHTTP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("HTTP address %s is already in use; stop what listens there, or pick another with --http", addr)
		}
		return fmt.Errorf("HTTP address %s: %w", addr, err)
	}
	return ln.Close()
}
