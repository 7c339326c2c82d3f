package audit

import (
	"fmt"
	"time"
)

// LiveDigestKey is the key of the lease bucket (events.LeaderBucket)
// where the leading scheduler keeps the digest of its fold
// (services/scheduler): rewritten while it leads, gone with its lease
// (the bucket's TTL) or when it steps down.
const LiveDigestKey = "scheduler-digest"

// LiveDigest is the leading scheduler's record under LiveDigestKey: the
// Digest of its fold's state after sequence Seq.
type LiveDigest struct {
	Instance string    `json:"instance"`
	Epoch    uint64    `json:"epoch"`
	Seq      uint64    `json:"seq"`
	Digest   string    `json:"digest"`
	Time     time.Time `json:"time"` // when the scheduler computed it (its clock)
}

// What Report.Live says.
const (
	LiveMatch    = "match"             // the live digest equals the replay's at its sequence
	LiveMismatch = "mismatch"          // it does not (a LiveDigestMismatch violation)
	LiveNone     = "no scheduler live" // no digest in the lease bucket: no leader now
	LiveArchive  = "not checked: an archive has no live scheduler"
)

// LiveDigestMismatch: the live scheduler's state differs from a fresh
// replay of the log up to the same sequence.
const LiveDigestMismatch = "live-digest-mismatch"

// checkLive compares the live digest with the replay's at its sequence
// (replayAt, "" when the log does not reach it).
func (r *Report) checkLive(l *LiveDigest, replayAt string) {
	r.LiveDigest, r.LiveDigestSeq, r.LiveInstance, r.ReplayDigestAtLiveSeq = l.Digest, l.Seq, l.Instance, replayAt
	if replayAt == l.Digest {
		r.Live = LiveMatch
		return
	}
	r.Live = LiveMismatch
	detail := fmt.Sprintf("scheduler %s (epoch %d) has digest %s after seq %d, a fresh replay %s", l.Instance, l.Epoch, l.Digest, l.Seq, replayAt)
	if replayAt == "" {
		detail = fmt.Sprintf("scheduler %s (epoch %d) reports seq %d, beyond the log's last %d", l.Instance, l.Epoch, l.Seq, r.LastSeq)
	}
	r.Violations = append(r.Violations, Violation{Seq: l.Seq, Kind: LiveDigestMismatch, Detail: detail})
}
