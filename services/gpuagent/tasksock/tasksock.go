package tasksock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Limits of one socket.
const (
	// MaxBody bounds a request body, in bytes (413 above).
	MaxBody = 64 << 10
	// MaxWaiting bounds the long-polls waiting at once on one socket (429
	// above).
	MaxWaiting = 16
	// MaxWait bounds one long-poll's wait.
	MaxWait = 5 * time.Minute
	// maxPath is the longest path a Unix socket can bind (sun_path less
	// its NUL).
	maxPath = 107
)

// Task is what GET /v1/task answers: the run's task as the node knows it.
type Task struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Team string `json:"team"`
	// Attempt counts the task's runs: 1 for the first, one more after each
	// preemption or loss of its node.
	Attempt int `json:"attempt"`
	// Run is the run's dispatch sequence (its run directory's name).
	Run        uint64 `json:"run"`
	ResumeFrom string `json:"resume_from"`
	// ResumeStep is the step of ResumeFrom when its job said (0: not given).
	ResumeStep    int64    `json:"resume_step"`
	GraceS        float64  `json:"grace_s"`
	Signal        string   `json:"preempt_signal"`
	GPUs          []string `json:"gpus"`
	Node          string   `json:"node"`
	CheckpointDir string   `json:"checkpoint_dir"`
}

// Preemption is what GET /v1/preemption answers.
type Preemption struct {
	Requested bool   `json:"requested"`
	Reason    string `json:"reason"`
	// Deadline is when SIGTERM comes (the grace's end); nil until requested.
	Deadline   *time.Time `json:"deadline"`
	GraceS     float64    `json:"grace_s"`
	ByTask     string     `json:"by_task"`
	ByPriority string     `json:"by_priority"`
	Policy     string     `json:"policy"`
}

// Progress is the latest progress a job reported.
type Progress struct {
	Step     int64     `json:"step,omitempty"`
	Total    int64     `json:"total,omitempty"`
	Fraction float64   `json:"fraction"`
	At       time.Time `json:"at"`
}

// Checkpoint is a committed checkpoint a job reports.
type Checkpoint struct {
	Ref  string `json:"ref"`
	Step int64  `json:"step,omitempty"`
}

// Committed answers POST /v1/checkpoint: Seq is the checkpointed event's
// sequence when the log has it; Spooled, when NATS was out of reach and
// the node keeps it for the log (the agent reports it once NATS is back).
type Committed struct {
	TaskID  string `json:"task_id"`
	Ref     string `json:"ref"`
	Step    int64  `json:"step,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
	Spooled bool   `json:"spooled,omitempty"`
	Note    string `json:"note,omitempty"`
}

// Backend is the agent's side of the sockets.
type Backend interface {
	// Checkpoint records a committed checkpoint of the run's task (the
	// checkpointed event, or the node's spool while NATS is out of reach).
	Checkpoint(ctx context.Context, task Task, c Checkpoint) (Committed, error)
}

// Run is one run's socket to open.
type Run struct {
	// Key names the run among the server's sockets.
	Key string
	// RunDir is the run's directory; the socket is <RunDir>/sock/task.sock
	// (or, when that path is too long for a Unix socket, one under the
	// system's temporary directory: Path).
	RunDir string
	Task   Task
	// Owner answers the pid of the run's supervisor (0 while unknown):
	// every process of the task descends from it.
	Owner func() int
}

// Path is where a run directory's socket is: <runDir>/sock/task.sock, or
// <tmp>/gpuq-<uid>/<hash of runDir>.sock when that path is longer than a
// Unix socket's address allows (107 bytes).
func Path(runDir string) string {
	p := filepath.Join(runDir, "sock", "task.sock")
	if len(p) <= maxPath {
		return p
	}
	sum := sha256.Sum256([]byte(runDir))
	return filepath.Join(os.TempDir(), fmt.Sprintf("gpuq-%d", os.Getuid()), hex.EncodeToString(sum[:12])+".sock")
}

// Server serves the sockets of one node's runs.
type Server struct {
	backend Backend
	now     func() time.Time
	// ancestors is the process ancestry of a pid, nearest first (a seam:
	// tests give their own).
	ancestors func(pid int) []int

	mu    sync.Mutex
	socks map[string]*Socket
}

// NewServer makes a server whose checkpoints go to b.
func NewServer(b Backend) *Server {
	return &Server{backend: b, now: time.Now, ancestors: ancestors, socks: map[string]*Socket{}}
}

// Socket is one run's socket.
type Socket struct {
	srv  *Server
	run  Run
	path string
	ln   *net.UnixListener
	http *http.Server

	mu       sync.Mutex
	pre      Preemption
	changed  chan struct{} // closed when pre changes
	progress *Progress
	waiting  int
	seq      uint64 // checkpoint requests, for their message ids
}

// Open creates the run's socket (replacing a stale one a crashed agent
// left) and serves it until Close. A run already open is closed first.
func (s *Server) Open(r Run) (*Socket, error) {
	s.Close(r.Key)
	path := Path(r.RunDir)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("tasksock: %w", err)
	}
	// The directory is the socket's only: 0700 whatever the umask made it.
	if err := os.Chmod(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("tasksock: %w", err)
	}
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("tasksock: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	_ = os.Chmod(path, 0o600)
	k := &Socket{srv: s, run: r, path: path, ln: ln, changed: make(chan struct{})}
	k.pre.GraceS = r.Task.GraceS
	k.http = &http.Server{
		Handler:           k.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerPID(c))
		},
	}
	s.mu.Lock()
	s.socks[r.Key] = k
	s.mu.Unlock()
	go func() { _ = k.http.Serve(ln) }()
	return k, nil
}

// Path is where the socket listens (GPUQ_TASK_SOCKET).
func (k *Socket) Path() string { return k.path }

// Get returns the open socket of a run.
func (s *Server) Get(key string) *Socket {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.socks[key]
}

// Close stops serving a run's socket and removes it.
func (s *Server) Close(key string) {
	s.mu.Lock()
	k := s.socks[key]
	delete(s.socks, key)
	s.mu.Unlock()
	if k != nil {
		k.close()
	}
}

// CloseAll closes every socket (the agent stops; a restarted agent opens
// them again when it adopts the runs).
func (s *Server) CloseAll() {
	s.mu.Lock()
	all := s.socks
	s.socks = map[string]*Socket{}
	s.mu.Unlock()
	for _, k := range all {
		k.close()
	}
}

func (k *Socket) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// Long-polls end at once: Shutdown does not wait for them.
	k.mu.Lock()
	close(k.changed)
	k.changed = make(chan struct{})
	k.mu.Unlock()
	if k.http.Shutdown(ctx) != nil {
		_ = k.http.Close()
	}
	_ = os.Remove(k.path)
}

// SetPreemption records the run's preemption request (its deadline is when
// SIGTERM comes) and answers every long-poll waiting for it.
func (k *Socket) SetPreemption(p Preemption) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p.GraceS == 0 {
		p.GraceS = k.run.Task.GraceS
	}
	k.pre = p
	close(k.changed)
	k.changed = make(chan struct{})
}

// Preemption is what the socket answers now.
func (k *Socket) Preemption() Preemption {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pre
}

// Progress is the latest progress the job reported (ok false: none).
func (k *Socket) Progress() (Progress, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.progress == nil {
		return Progress{}, false
	}
	return *k.progress, true
}

// Task is the run's task as the socket answers it.
func (k *Socket) Task() Task { return k.run.Task }

type peerKey struct{}

// peerPID is the pid of the process at the other end of c (0 unknown).
func peerPID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// ancestors lists pid and its ancestors, nearest first (Linux /proc).
func ancestors(pid int) []int {
	var out []int
	for i := 0; pid > 1 && i < 4096; i++ {
		out = append(out, pid)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			break
		}
		s := string(b)
		j := strings.LastIndexByte(s, ')')
		if j < 0 || j+4 > len(s) {
			break
		}
		var state byte
		var ppid int
		if _, err := fmt.Sscanf(s[j+2:], "%c %d", &state, &ppid); err != nil {
			break
		}
		pid = ppid
	}
	return out
}

// errOtherTask: the peer is a process of another task of this node.
var errOtherTask = errors.New("this socket is another task's: a task reaches only its own (GPUQ_TASK_SOCKET)")

// admit checks the connection's peer: a process of another run of this
// node is refused; the run's own processes, and processes outside every
// task, are admitted.
func (k *Socket) admit(pid int) error {
	if pid <= 0 {
		return nil // unknown peer (not Linux): file modes only
	}
	chain := k.srv.ancestors(pid)
	in := map[int]bool{}
	for _, p := range chain {
		in[p] = true
	}
	if own := k.run.Owner; own != nil {
		if o := own(); o > 0 && in[o] {
			return nil
		}
	}
	k.srv.mu.Lock()
	defer k.srv.mu.Unlock()
	for key, other := range k.srv.socks {
		if key == k.run.Key || other.run.Owner == nil {
			continue
		}
		if o := other.run.Owner(); o > 0 && in[o] {
			return errOtherTask
		}
	}
	return nil
}
