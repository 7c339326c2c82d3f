package runner

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A task is every process its supervisor's `sh -c` started, wherever they
// went: its process group, and the processes that left it (setsid,
// setpgid, a daemon's double fork). The supervisor is a child subreaper
// (PR_SET_CHILD_SUBREAPER), so an orphaned process of the task is
// re-parented to it rather than to init, and the task is exactly the
// supervisor's descendants in /proc. No cgroup is needed, which is what a
// node without a delegated cgroup offers; what escapes this is a process
// that re-parents itself elsewhere (none can, short of ptrace tricks or a
// new PID namespace) or a process the task asked another service to start
// (systemd-run, a container daemon).

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// becomeSubreaper makes the calling process the reaper of its orphaned
// descendants.
func becomeSubreaper() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}

// procEntry is one process of /proc: its parent and its process group.
type procEntry struct {
	pid, ppid, pgid int
}

// readProcs lists every process with its parent and group (Linux /proc;
// empty elsewhere). A process that ends while it is read is left out.
func readProcs() []procEntry {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procEntry, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces; skip past ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue // a zombie has ended: nothing to signal
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgid, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, procEntry{pid: pid, ppid: ppid, pgid: pgid})
	}
	return out
}

// descendants lists the live descendants of root (root excluded).
func descendants(root int) []procEntry {
	all := readProcs()
	children := map[int][]procEntry{}
	for _, p := range all {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []procEntry
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if !seen[c.pid] {
				seen[c.pid] = true
				out = append(out, c)
				queue = append(queue, c.pid)
			}
		}
	}
	return out
}

// signalTask sends sig to every process of the task: the job's process
// group pgid and every descendant of its supervisor sup outside that
// group. The group is signalled as a group only while it provably is the
// job's (its leader alive, or a descendant of the supervisor in it): a
// group whose every member ended may name another's group later. With no
// live supervisor (killed; the job orphaned to init), only a live leader's
// group is reached. It returns os.ErrProcessDone when no process got it.
func signalTask(sup Identity, leader Identity, sig syscall.Signal) error {
	pgid := leader.PID
	if pgid <= 0 {
		return os.ErrProcessDone
	}
	var rest []int
	groupOurs := leader.Alive()
	if sup.Alive() {
		for _, p := range descendants(sup.PID) {
			if p.pgid == pgid {
				groupOurs = true
			} else {
				rest = append(rest, p.pid)
			}
		}
	}
	sent := 0
	var first error
	note := func(err error) {
		switch {
		case err == nil:
			sent++
		case errors.Is(err, syscall.ESRCH):
		case first == nil:
			first = err
		}
	}
	if groupOurs {
		note(syscall.Kill(-pgid, sig))
	}
	for _, pid := range rest {
		note(syscall.Kill(pid, sig))
	}
	if sent == 0 {
		if first != nil {
			return first
		}
		return os.ErrProcessDone
	}
	return nil
}

// recordEvery is how often a supervisor records its task's processes.
var recordEvery = 2 * time.Second

// recordProcs keeps procs.json, the identities of the task's processes
// (the supervisor's descendants), current until done: should the
// supervisor be killed, its orphans go to init, out of the process tree,
// and the agent sweeps them from this record (killRecorded).
func recordProcs(dir string, self Identity, done <-chan struct{}) {
	path := filepath.Join(dir, procsFile)
	var last string
	t := time.NewTicker(recordEvery)
	defer t.Stop()
	for {
		var ids []Identity
		for _, p := range descendants(self.PID) {
			if st := startTicks(p.pid); st != 0 {
				ids = append(ids, Identity{PID: p.pid, Start: st, Boot: self.Boot})
			}
		}
		if b, err := json.Marshal(ids); err == nil && string(b) != last {
			// No fsync: the record matters only while this boot lasts.
			if os.WriteFile(path+".tmp", b, 0o644) == nil && os.Rename(path+".tmp", path) == nil {
				last = string(b)
			}
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// killRecorded kills every process of the run's last record that still
// runs (the same pid, start ticks and boot: never a reused pid).
func killRecorded(dir string) {
	var ids []Identity
	if readJSON(filepath.Join(dir, procsFile), &ids) != nil {
		return
	}
	for _, id := range ids {
		if id.Alive() {
			_ = syscall.Kill(id.PID, syscall.SIGKILL)
		}
	}
}
