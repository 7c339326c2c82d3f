//go:build faults

// Command gpuq-natsd is a bare nats-server with JetStream on disk, run by
// the fault suite as its own process so that it can be killed and
// restarted under load (the services see a real server go away and come
// back on the same port and store).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	port := flag.Int("port", 4222, "client port")
	store := flag.String("store", "", "JetStream store directory")
	flag.Parse()
	if *store == "" {
		fmt.Fprintln(os.Stderr, "gpuq-natsd: --store is required")
		os.Exit(2)
	}
	ns, err := server.NewServer(&server.Options{ServerName: "gpuq-faults", Host: "127.0.0.1", Port: *port,
		JetStream: true, StoreDir: *store, NoSigs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuq-natsd:", err)
		os.Exit(1)
	}
	ns.ConfigureLogger()
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "gpuq-natsd: not ready in 30 s")
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "gpuq-natsd: ready on", ns.ClientURL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	ns.Shutdown()
	ns.WaitForShutdown()
}
