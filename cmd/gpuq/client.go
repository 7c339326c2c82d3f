package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/api"
)

// clientFlags are shared by every client command.
type clientFlags struct {
	url  string
	json bool
}

func (f *clientFlags) add(c *cobra.Command) {
	def := os.Getenv("GPUQ_NATS_URL")
	if def == "" {
		def = "nats://127.0.0.1:4222"
	}
	c.Flags().StringVar(&f.url, "nats", def, "NATS server URL (env GPUQ_NATS_URL)")
	c.Flags().BoolVar(&f.json, "json", false, "print JSON")
}

func (f *clientFlags) connect() (*nats.Conn, error) {
	nc, err := nats.Connect(f.url, nats.Name("gpuq-cli"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (start one with `gpuq dev`, or set --nats / GPUQ_NATS_URL)", f.url, err)
	}
	return nc, nil
}

func (f *clientFlags) client() (*api.Client, func(), error) {
	nc, err := f.connect()
	if err != nil {
		return nil, nil, err
	}
	return &api.Client{NC: nc, Timeout: 15 * time.Second}, nc.Close, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
