package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"slices"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
)

// Digest is a SHA-256 of the folded state: every exported field of every
// task and node, the GPU owners, the idempotency index, the counters, the
// leader epoch and the last sequence and time — everything a fold
// decides. Two folds of the same records give the same digest, on any
// machine (times are taken in UTC); an archive and its import give the
// digest of the log they came from. Maps are written sorted by key.
func Digest(st *domain.State) string {
	ids := make([]string, 0, len(st.Tasks))
	for id := range st.Tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	tasks := make([]domain.Task, 0, len(ids))
	for _, id := range ids {
		t := *st.Tasks[id]
		utc(reflect.ValueOf(&t).Elem())
		tasks = append(tasks, t)
	}
	names := make([]string, 0, len(st.Nodes))
	for n := range st.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	nodes := make([]domain.Node, 0, len(st.Nodes))
	for _, n := range names {
		nodes = append(nodes, *st.Nodes[n])
	}
	doc := struct {
		Seq              uint64
		LastTime         time.Time
		Skipped, Ignored int
		Epoch, EpochSeq  uint64
		Tasks            []domain.Task
		Nodes            []domain.Node
		Owner, Idem      map[string]string
	}{st.Seq, st.LastTime.UTC(), st.Skipped, st.Ignored, st.Epoch, st.EpochSeq, tasks, nodes, st.Owner, st.Idem}
	b, err := json.Marshal(doc)
	if err != nil {
		panic("audit: digest: " + err.Error()) // only plain data above
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

var timeType = reflect.TypeFor[time.Time]()

// utc sets every exported time.Time field of the struct v to UTC, so that
// a time read in another zone writes the same JSON.
func utc(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Type() == timeType && f.CanSet() {
			f.Set(reflect.ValueOf(f.Interface().(time.Time).UTC()))
		}
	}
}
