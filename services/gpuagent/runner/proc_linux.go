package runner

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// procStat is what /proc/<pid>/stat says of a process: its state letter
// and its start time in clock ticks since boot. A pid with the same start
// time on the same boot is the same process; a reused pid has another.
type procStat struct {
	State byte
	Start uint64
}

// readStat reads /proc/<pid>/stat; ok is false when there is no such
// process.
func readStat(pid int) (procStat, bool) {
	if pid <= 0 {
		return procStat{}, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	// pid (comm) state ppid pgrp ... starttime is field 22; comm may hold
	// spaces and parentheses, so count from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, false
	}
	return procStat{State: f[0][0], Start: start}, true
}

// startTicks is pid's start time, 0 when it is not running.
func startTicks(pid int) uint64 {
	st, ok := readStat(pid)
	if !ok {
		return 0
	}
	return st.Start
}

// alive reports whether pid is the process that started at start ticks
// and has not exited (a zombie has exited).
func isAlive(pid int, start uint64) bool {
	st, ok := readStat(pid)
	return ok && st.Start == start && st.State != 'Z' && st.State != 'X'
}

var (
	bootOnce sync.Once
	bootID   string
)

// BootID is this machine's boot id (/proc/sys/kernel/random/boot_id): a
// process recorded under another boot id is gone, whatever its pid now
// names.
func BootID() string {
	bootOnce.Do(func() {
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err == nil {
			bootID = strings.TrimSpace(string(b))
		}
		if bootID == "" {
			bootID = "unknown"
		}
	})
	return bootID
}

// Identity names one process across time: pid, start ticks and boot id.
type Identity struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start_ticks"`
	Boot  string `json:"boot_id"`
}

// Self is the calling process's identity.
func Self() Identity {
	return Identity{PID: os.Getpid(), Start: startTicks(os.Getpid()), Boot: BootID()}
}

// Alive reports whether the process the identity names still runs.
func (id Identity) Alive() bool {
	return id.PID > 0 && id.Boot == BootID() && isAlive(id.PID, id.Start)
}
