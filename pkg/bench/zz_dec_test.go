package bench

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

func sampleMsgs(b *testing.B) []events.Stored {
	var out []events.Stored
	_ = history(4, 4000, func(e events.Event, at time.Time) error {
		subj, data, _, _ := events.Encode(e, events.Meta{Time: at})
		out = append(out, events.Stored{Seq: uint64(len(out) + 1), Subject: subj, Data: data})
		return nil
	})
	return out[4:]
}

func BenchmarkZDecode(b *testing.B) {
	ms := sampleMsgs(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		events.Decode(ms[i%len(ms)])
	}
}

func BenchmarkZEnvelopeOnly(b *testing.B) {
	ms := sampleMsgs(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var env events.Envelope
		json.Unmarshal(ms[i%len(ms)].Data, &env)
	}
}

func BenchmarkZEncode(b *testing.B) {
	ms := sampleMsgs(b)
	recs := make([]events.Record, len(ms))
	for i, m := range ms {
		recs[i], _ = events.Decode(m)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		events.Encode(recs[i%len(recs)].Event, events.Meta{Time: time.Now()})
	}
}
