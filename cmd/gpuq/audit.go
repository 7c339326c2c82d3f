package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/events"
	eventlog "github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/service"
)

func newAudit() *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "Check the log itself: invariants and digest, skipped records, export and import",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(newAuditSkipped(), newAuditVerify(), newAuditExport(), newAuditImport())
	return c
}

func newAuditSkipped() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "skipped",
		Short: "Records the fold skipped (undecodable, unknown, invalid, impossible), with why",
		Long: `Folds the whole log as every service does and lists each record the fold
did not apply, once, in log order: its sequence, subject and the reason
(it does not decode, has an unknown type or version, is too large, carries
invalid data, contradicts its subject, or is impossible in its task's
state). The log cannot be edited, so these records stay; no service
stops on them.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return f.withLog(func(l *eventlog.Log) error {
				skips, err := service.Skipped(c.Context(), l)
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(os.Stdout, skips)
				}
				if len(skips) == 0 {
					fmt.Println("no record skipped")
					return nil
				}
				fmt.Printf("%8s  %-48s  %s\n", "SEQ", "SUBJECT", "REASON")
				for _, s := range skips {
					fmt.Printf("%8d  %-48s  %s\n", s.Seq, s.Subject, s.Reason)
				}
				return nil
			})
		},
	}
	f.add(c)
	return c
}

func newAuditVerify() *cobra.Command {
	var (
		f    clientFlags
		p    policyFlags
		file string
	)
	c := &cobra.Command{
		Use:   "verify",
		Short: "Fold the whole log and check every invariant; exit 1 when one was broken",
		Long: `Folds the whole log (or an archive, --file, offline) and checks at every
record: no GPU held by two tasks at once; every dispatch had the capacity
(known, healthy GPUs on a schedulable node, of the model and memory asked,
as many as asked); no CRITICAL or non-preemptible task preempted; every
preemption allowed by the policy it names; every preempted task requeued,
resumed or cancelled; with --teams, no team left below its guarantee
while preemptible borrowers held GPUs. It lists the records the fold
skipped, the digest of the folded state, and from the live stream its
deny_delete and deny_purge settings. With a live cluster it also compares
the leading scheduler's digest of its own state (kept in the lease bucket
while it leads) with the replay's digest after the same sequence: a
difference is a live-digest-mismatch violation; no scheduler live is
reported, not a failure. Exit 1 when not ok.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o, err := p.options()
			if err != nil {
				return err
			}
			var (
				recs []events.Record
				rep  audit.Report
			)
			if file != "" {
				ls, err := readArchive(file)
				if err != nil {
					return err
				}
				rep = audit.Verify(audit.Records(ls), audit.Options{Teams: o.Teams, Policy: o})
				rep.Live = audit.LiveArchive
			} else {
				err := f.withLog(func(l *eventlog.Log) error {
					// The live digest first: the log read after it reaches
					// its sequence.
					live, liveNote := liveDigest(c.Context(), l.JetStream())
					_, err := events.ReadAll(c.Context(), l, 1, "", func(r events.Record) error {
						recs = append(recs, r)
						return nil
					})
					if err != nil {
						return err
					}
					rep = audit.Verify(recs, audit.Options{Teams: o.Teams, Policy: o, Live: live})
					if live == nil {
						rep.Live = liveNote
					}
					ctx, cancel := context.WithTimeout(c.Context(), 10*time.Second)
					defer cancel()
					s, err := l.JetStream().Stream(ctx, events.StreamName)
					if err != nil {
						return fmt.Errorf("stream %s: %w", events.StreamName, err)
					}
					cfg := s.CachedInfo().Config
					rep.DenyDelete, rep.DenyPurge = &cfg.DenyDelete, &cfg.DenyPurge
					rep.Finish()
					return nil
				})
				if err != nil {
					return err
				}
			}
			if f.json {
				if err := printJSON(os.Stdout, rep); err != nil {
					return err
				}
			} else {
				printReport(rep)
			}
			if !rep.OK {
				return &exitError{exitErr, fmt.Errorf("audit verify: not ok (%d violations)", len(rep.Violations))}
			}
			return nil
		},
	}
	c.Flags().StringVar(&file, "file", "", "verify an archive (gpuq audit export) offline instead of the live log")
	f.add(c)
	p.add(c)
	return c
}

// liveDigest reads the leading scheduler's digest from the lease bucket;
// without one, what to report instead (no scheduler live, or why it could
// not be read). Neither is a failure.
func liveDigest(ctx context.Context, j jetstream.JetStream) (*audit.LiveDigest, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := j.KeyValue(ctx, events.LeaderBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, audit.LiveNone
	}
	if err != nil {
		return nil, "unavailable: " + err.Error()
	}
	e, err := kv.Get(ctx, audit.LiveDigestKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, audit.LiveNone
	}
	if err != nil {
		return nil, "unavailable: " + err.Error()
	}
	var v audit.LiveDigest
	if err := json.Unmarshal(e.Value(), &v); err != nil || v.Digest == "" {
		return nil, fmt.Sprintf("unavailable: the live digest record does not decode (%v)", err)
	}
	return &v, ""
}

func printReport(r audit.Report) {
	status := "ok"
	if !r.OK {
		status = "NOT OK"
	}
	fmt.Printf("%s: %d events (last sequence %d), %d violations, %d records skipped\n", status, r.Events, r.LastSeq, len(r.Violations), len(r.Skipped))
	fmt.Printf("digest: %s\n", r.Digest)
	if r.DenyDelete != nil {
		fmt.Printf("stream: deny_delete %v, deny_purge %v\n", *r.DenyDelete, *r.DenyPurge)
	}
	if r.LiveDigest != "" {
		fmt.Printf("live scheduler %s: %s (its digest after seq %d: %s)\n", r.LiveInstance, r.Live, r.LiveDigestSeq, r.LiveDigest)
	} else if r.Live != "" {
		fmt.Printf("live scheduler: %s\n", r.Live)
	}
	for _, v := range r.Violations {
		fmt.Printf("%8d  %-26s  %s  %s\n", v.Seq, v.Kind, v.TaskID, v.Detail)
	}
	for _, s := range r.Skipped {
		fmt.Printf("%8d  skipped  %s  %s\n", s.Seq, s.Subject, s.Reason)
	}
}

func readArchive(path string) ([]audit.Line, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, &exitError{exitInvalid, fmt.Errorf("file: %w", err)}
	}
	defer fh.Close()
	ls, err := audit.ReadLines(fh)
	if err != nil {
		return nil, &exitError{exitInvalid, fmt.Errorf("file %s: %w", path, err)}
	}
	return ls, nil
}

func newAuditExport() *cobra.Command {
	var (
		f            clientFlags
		since, until string
	)
	c := &cobra.Command{
		Use:   "export [--since T] [--until T]",
		Short: "Write the log as JSON Lines: sequence, subject, log time and the stored envelope, byte for byte",
		Long: `Writes every record of the log (or those whose log time is within
--since and --until, RFC 3339, both inclusive) to stdout, one JSON object
per line: {"seq", "subject", "time", "data"}, data being the stored
envelope unchanged ("raw", base64, for a record that is not JSON). time is
the record's log time: the stream's stored time, or an imported record's
original one. gpuq audit import appends such a file to an empty stream;
gpuq audit verify --file checks it offline.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			from, err := timeFlag("since", since)
			if err != nil {
				return err
			}
			to, err := timeFlag("until", until)
			if err != nil {
				return err
			}
			return f.withLog(func(l *eventlog.Log) error {
				w := bufio.NewWriterSize(os.Stdout, 1<<16)
				_, err := l.Read(c.Context(), 1, "", func(m events.Stored) error {
					line := audit.LineOf(m)
					if (!from.IsZero() && line.Time.Before(from)) || (!to.IsZero() && line.Time.After(to)) {
						return nil
					}
					b, err := json.Marshal(line)
					if err != nil {
						return err
					}
					w.Write(b)
					return w.WriteByte('\n')
				})
				if err != nil {
					return err
				}
				return w.Flush()
			})
		},
	}
	c.Flags().StringVar(&since, "since", "", "only records at or after this log time (RFC 3339)")
	c.Flags().StringVar(&until, "until", "", "only records at or before this log time (RFC 3339)")
	f.add(c)
	return c
}

func timeFlag(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return t, invalid(name, fmt.Sprintf("must be an RFC 3339 time such as 2026-11-29T22:17:28Z (got %q)", v))
	}
	return t, nil
}

func newAuditImport() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "import FILE",
		Short: "Append an archive (gpuq audit export) to an empty stream, keeping order, ids, payloads and log times",
		Long: `Appends every line of an archive, in order, to the audit stream, which
must be empty, and nothing else may write to it meanwhile: start the
cluster with gpuq dev --nodes 0 (no agent, no scheduler) on a fresh --data,
import, then restart it with its nodes on the same --data. Each append
expects the stream's previous sequence, so a record another writer appends
meanwhile stops the import. Each envelope is stored as it was exported, with one key
added in front: "origin": {"seq", "time"}, the record's sequence and log
time in the log it came from. Folds take that time as the record's (see
docs/events.md), so the imported log folds to the same state and digest.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return invalid("file", "exactly one archive file is required")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			ls, err := readArchive(args[0])
			if err != nil {
				return err
			}
			return f.withLog(func(l *eventlog.Log) error {
				last, err := l.LastSeq(c.Context())
				if err != nil {
					return err
				}
				if last != 0 {
					return refused("the stream holds %d records already: import only into an empty stream (gpuq dev --nodes 0 on a fresh --data)", last)
				}
				out := importResult{Imported: 0, SameSeqs: true}
				const chunk = 512
				for from := 0; from < len(ls); from += chunk {
					part := ls[from:min(from+chunk, len(ls))]
					ms := make([]events.Msg, len(part))
					// Each append expects the stream's last sequence to be the
					// previous one's: a record another writer appends meanwhile
					// stops the import at once instead of interleaving.
					prev := out.LastSeq
					for i, line := range part {
						ms[i] = events.Msg{Subject: line.Subject, Data: audit.ImportData(line), Expect: &events.Expect{Filter: ">", LastSeq: prev + uint64(i)}}
					}
					for i, r := range events.AppendAll(c.Context(), l, ms) {
						if errors.Is(r.Err, events.ErrConflict) {
							return fmt.Errorf("line with seq %d: another writer appended to the stream during the import (%d records imported): import into a cluster where nothing writes (gpuq dev --nodes 0)", part[i].Seq, out.Imported)
						}
						if r.Err != nil {
							return fmt.Errorf("line with seq %d: %w (%d records imported)", part[i].Seq, r.Err, out.Imported)
						}
						if out.Imported == 0 {
							out.FirstSeq = r.Ack.Seq
						}
						out.LastSeq = r.Ack.Seq
						out.Imported++
						if r.Ack.Seq != part[i].Seq {
							out.SameSeqs = false
						}
					}
				}
				if f.json {
					return printJSON(os.Stdout, out)
				}
				fmt.Printf("imported %d records (sequences %d–%d)\n", out.Imported, out.FirstSeq, out.LastSeq)
				if !out.SameSeqs {
					fmt.Fprintln(os.Stderr, "gpuq: warning: the sequences differ from the archive's (a partial export?): decisions' based_on_seq refer to the old ones")
				}
				return nil
			})
		},
	}
	f.add(c)
	return c
}

type importResult struct {
	Imported int    `json:"imported"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	SameSeqs bool   `json:"same_seqs"`
}
