// Package embeddedtest starts the embedded nats-server for tests: in
// process, no listener, JetStream in the test's temporary directory, shut
// down when the test ends.
package embeddedtest

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/embedded"
)

// Server starts a server of the test's own.
func Server(t testing.TB) *embedded.Server {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Connect opens an in-process connection named name, closed when the test
// ends.
func Connect(t testing.TB, srv *embedded.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := srv.Connect(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
