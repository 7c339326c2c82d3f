package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newHealth is `gpuq health URL`: the container health check of images
// without a shell or curl (deploy/compose.yaml). It GETs the URL and
// exits 0 on a 2xx answer, 1 otherwise, printing the status and the
// start of the body.
func newHealth() *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "health URL",
		Short: "Check an HTTP health endpoint (exit 0 on 2xx): for container health checks",
		Example: `  gpuq health http://127.0.0.1:8080/healthz
  gpuq health 'http://nats-1:8222/healthz?js-enabled-only=true'`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if timeout <= 0 {
				return invalid("timeout", "must be > 0")
			}
			ctx, cancel := context.WithTimeout(c.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
			if err != nil {
				return invalid("URL", err.Error())
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return &exitError{exitErr, fmt.Errorf("health %s: %w", args[0], err)}
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			line := strings.TrimSpace(strings.SplitN(string(body), "\n", 2)[0])
			if resp.StatusCode/100 != 2 {
				return &exitError{exitErr, fmt.Errorf("health %s: %s %s", args[0], resp.Status, line)}
			}
			fmt.Fprintln(c.OutOrStdout(), "ok:", resp.Status, line)
			return nil
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return c
}
