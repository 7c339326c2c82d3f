package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestExploreLife(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LIFE"))
	if n == 0 {
		t.Skip()
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(0, &ru0)
	w := time.Now()
	r, err := Lifecycle(context.Background(), t.TempDir(), LifecycleOptions{Tasks: n, Nodes: 125})
	if err != nil {
		t.Fatal(err)
	}
	syscall.Getrusage(0, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b, _ := json.Marshal(r)
	fmt.Printf("%s\nwall %v cpu %v tasks/s %.0f\n", b, time.Since(w), cpu, r.PerS())
}
