// Package scheduler is the only writer of scheduling decisions. It holds a
// leader lease (a JetStream KV key with a TTL) so exactly one instance is
// active; standbys retry until the lease lapses. The leader folds the whole
// log into a domain.State, follows it, and after each batch of new events
// asks the policy package for decisions and appends them as events:
// dispatched (with the log sequence it was based on), preempt_requested,
// requeued, lost. A pass's events are published together and then their
// acks awaited (events.AppendAll); each is stored or refused as if appended
// alone, in order.
//
// Every decision is appended with an expected-sequence check on the task's
// subjects, so a decision made on stale task state is refused by the stream
// and re-made on the next pass. The leader waits until it has folded its own
// appends before deciding again, so it never allocates a GPU twice; the fold
// itself also ignores a dispatch onto a held GPU (first in log order wins).
package scheduler
