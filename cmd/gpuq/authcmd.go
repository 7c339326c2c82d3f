package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/auth"
)

func newAuth() *cobra.Command {
	c := &cobra.Command{Use: "auth", Short: "Credentials and permissions: NATS users per role (JWTs), job signing keys, HTTP tokens per team"}
	var teams, nodes string
	initCmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Write a nats-server operator config, one credentials file per role, a job signing key per node and one HTTP token per team (all mode 0600)",
		Long: `Writes under DIR, with NATS's decentralised (JWT) authentication:
  nats-auth.conf            the operator JWT, system_account and a memory resolver preloaded
                            with the accounts' JWTs (include it in nats-server's config;
                            gpuq dev --auth DIR loads it)
  creds/<role>.creds        one user JWT with the role's permissions and its seed per role
                            (nats --creds FILE): submitter, scheduler, advisor, notifier, auditor, admin,
                            agent-<node> per --nodes, ci-<team> per --teams
  creds/agent-<node>.jobs.nk  the node's scoped signing key: its agent mints each run's own
                            credential with it (gpuq-agent --job-signer)
  keys/{operator,account,system}.nk  the seeds that signed the JWTs; keep them offline
  tokens/<team>             HTTP bearer token per team, and tokens/admin
Roles and their permissions: docs/operations.md, "Security".`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ts, err := splitNames("teams", teams)
			if err != nil {
				return err
			}
			ns, err := splitNames("nodes", nodes)
			if err != nil {
				return err
			}
			roles, err := auth.Init(args[0], ts, ns)
			if err != nil {
				return &exitError{exitInvalid, err}
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "wrote %s\n", filepath.Join(args[0], auth.ConfigFile))
			for _, r := range roles {
				fmt.Fprintf(out, "wrote %s\n", auth.CredsPath(args[0], r.Name))
			}
			for _, n := range ns {
				fmt.Fprintf(out, "wrote %s\n", auth.JobSignerPath(args[0], n))
			}
			fmt.Fprintf(out, "wrote %s (operator.nk, account.nk, system.nk: keep them offline)\n", filepath.Join(args[0], auth.KeysDir))
			for _, t := range append(ts, auth.AdminToken) {
				fmt.Fprintf(out, "wrote %s\n", filepath.Join(args[0], auth.TokensDir, t))
			}
			return nil
		},
	}
	initCmd.Flags().StringVar(&teams, "teams", "", "teams, comma-separated: a ci-<team> credential and an HTTP token each")
	initCmd.Flags().StringVar(&nodes, "nodes", "node-1", "agent nodes, comma-separated: an agent-<node> credential and job signing key each (gpuq dev names its nodes node-1 … node-N)")
	c.AddCommand(initCmd, newAuthRotate())
	return c
}

func newAuthRotate() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate DIR NAME...",
		Short: "New credentials for roles (or jobs-<node> signing keys) of an auth directory; the old ones are revoked",
		Long: `Makes new credentials under DIR (written by gpuq auth init) for each NAME,
keeping the operator and the accounts (keys/), so the server's JetStream data
stays where it is:
  <role>        submitter, scheduler, advisor, notifier, auditor, admin, agent-<node>,
                ci-<team>: a new creds/<role>.creds; the old user is revoked.
                A role that does not exist yet is added (ci-<team> with its
                HTTP token, agent-<node> with its job signing key).
  jobs-<node>   a new creds/agent-<node>.jobs.nk; the old key is removed from
                the account, and every job credential it minted stops working.
nats-auth.conf is rewritten: reload the NATS server (nats-server --signal
reload, or SIGHUP; gpuq dev: send it SIGHUP) and the revoked users are
disconnected; then restart each rotated service with its new file.
docs/operations.md, "Rotating credentials and tokens".`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			rot, err := auth.Rotate(args[0], args[1:])
			if err != nil {
				return &exitError{exitInvalid, err}
			}
			out := c.OutOrStdout()
			for _, f := range rot.Files {
				fmt.Fprintf(out, "wrote %s\n", f)
			}
			for _, k := range rot.Revoked {
				fmt.Fprintf(out, "revoked user %s\n", k)
			}
			for _, k := range rot.Removed {
				fmt.Fprintf(out, "removed job signing key %s\n", k)
			}
			fmt.Fprintf(out, "next: reload the NATS server (nats-server --signal reload), then restart the rotated services with their new files\n")
			return nil
		},
	}
}

// splitNames reads a comma-separated list of team or node names.
func splitNames(field, s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if err := auth.CheckName(strings.TrimSuffix(field, "s"), n); err != nil {
			return nil, invalid(field, err.Error())
		}
		if seen[n] {
			return nil, invalid(field, fmt.Sprintf("%q is given twice", n))
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}
