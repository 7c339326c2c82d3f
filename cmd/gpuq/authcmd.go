package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/auth"
)

func newAuth() *cobra.Command {
	c := &cobra.Command{Use: "auth", Short: "Credentials and permissions: NATS users per role, HTTP tokens per team"}
	var teams, nodes string
	initCmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Write a nats-server authorization config, one credentials file per role and one HTTP token per team (all mode 0600)",
		Long: `Writes under DIR:
  nats-auth.conf       nkey users with their permissions (include it in nats-server's config;
                       gpuq dev --auth DIR loads it)
  creds/<role>.nk      one nkey seed per role: submitter, scheduler, advisor, auditor, admin,
                       agent-<node> per --nodes, ci-<team> per --teams
  tokens/<team>        HTTP bearer token per team, and tokens/admin
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
			for _, t := range append(ts, auth.AdminToken) {
				fmt.Fprintf(out, "wrote %s\n", filepath.Join(args[0], auth.TokensDir, t))
			}
			return nil
		},
	}
	initCmd.Flags().StringVar(&teams, "teams", "", "teams, comma-separated: a ci-<team> credential and an HTTP token each")
	initCmd.Flags().StringVar(&nodes, "nodes", "node-1", "agent nodes, comma-separated: an agent-<node> credential each (gpuq dev names its nodes node-1 … node-N)")
	c.AddCommand(initCmd)
	return c
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
