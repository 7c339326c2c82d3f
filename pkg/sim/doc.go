// Package sim is the trace simulator behind `gpuq sim`: it replays a real
// GPU-cluster trace (pkg/trace) in virtual time under several policies and
// measures job completion time, queueing delay, utilization, preemptions
// and the accuracy of wait estimates, side by side in one run.
//
// Two kinds of policy are simulated:
//
//   - gpuq and gpuq-spf run the real code through the Log port: an
//     in-memory log (events/memlog) whose clock is the virtual time, the
//     fold (domain.State.Apply), the scheduler's pure step (decide.Plan,
//     the very function the scheduler service calls) and the advisor's
//     estimator (estimate.Estimator). Nothing of the policy is copied here;
//     this package only plays the parts of the submitters and the agents.
//   - fifo-strict and sjf-oracle are baselines that follow the HeliosArtifact
//     convention (baseline.go), so that their numbers compare with the
//     literature. They are literature conventions, not gpuq's policy: they
//     schedule the pooled cluster and ignore classes and teams.
//
// Everything is event-driven (a priority queue of ends and a cursor over
// submissions; the clock jumps from one instant to the next) and
// deterministic: the same trace and options give the same Result, byte for
// byte once encoded. The only randomness is the trace model's, from seeded
// math/rand/v2 PCG generators.
//
// # Trace model
//
// The traces carry no user estimate, class, team or command; the model
// supplies them, explicitly and seeded (model.go):
//
//   - The user's estimate (Submitted.Hours) is the real duration × e^N(µ,σ),
//     one draw per job in trace order from PCG(seed) (EstimateModel
//     "lognormal:mu=0.7,sigma=1,seed=1"), or the real duration ("exact"),
//     never below one minute. gpuq sees only this estimate and what it
//     learns from completed tasks; only sjf-oracle reads real durations.
//   - Every task is MEDIUM unless a ClassMix draws classes (one draw per
//     job from its own PCG, so it does not shift the estimate draws).
//   - With teams by VC, each VC is a team whose guarantee is its share of
//     the VC node counts (vcs.csv) of the simulated cluster; otherwise all
//     tasks are one team "trace" and there are no guarantees.
//   - Every task is preemptible, unless a share is given
//     (MarkPreemptible: one draw per task from its own PCG).
//   - A job that can never fit the simulated cluster (more GPUs than it
//     has) is left out of every policy and counted in Scenario.Unplaceable.
//   - A job that carries its own class, estimate and preemptibility (an
//     export of a gpuq log, read by ReadExport, export.go) keeps them:
//     the model supplies only what a trace lacks.
//
// The workload is a published trace, a synthetic one shaped like it
// (trace.Synthetic) or an export of the live log (ReadExport). Several
// cluster sizes run one after another on the same jobs (`--nodes 8,16,32`,
// SweepResult, WriteSweepPlots).
//
// # Agents and preemption
//
// The simulated agents start a dispatched task at the instant it is
// dispatched (Started) and complete it when its real remaining duration
// has elapsed (Completed). By default a task asked to yield
// (PreemptRequested) checkpoints at once: the agent appends Checkpointed
// (its progress as the reference) and Preempted with no lost work, and the
// task later resumes with duration − progress left; lost work is zero.
//
// Under the checkpoint model (Config.CheckpointEvery, `--checkpoint-every`)
// every running task checkpoints each CheckpointEvery of its run: the
// agent appends Checkpointed at that instant (the policy's least-lost
// choice of victims reads it), without a scheduling pass, since nothing the
// scheduler decides on changed. A task asked to yield runs on for its grace
// (120 s, the submitter's default) and exits (Preempted): it keeps the work
// of its last checkpoint and loses the rest of the run, grace included,
// recorded as Preempted.LostGPUSeconds and reported as lost_gpu_hours. A
// task that completes within its grace completes.
//
// # Metrics
//
// JCT = end − submit; queueing delay = first start − submit (and by the
// class the task was submitted in, when there are several); utilization =
// busy GPU-seconds / (GPUs × makespan), with the makespan from the first
// submission to the last end. Percentiles are nearest-rank.
//
// # Estimates
//
// Under the gpuq policy, three start estimates are made at every
// submission and judged over tasks whose actual wait is at least 60 s:
//
//   - gpuq: the advisor's estimator, fed every record in log order
//     (Observe after Apply); its P50 and P90 at submission (AtSubmit).
//   - slurm-backfill: what Slurm's backfill scheduler reports (squeue
//     --start): the queue planned in order on a profile of free GPUs over
//     time, each task at the earliest start where it fits for its whole
//     user estimate without moving an earlier task's planned start, from
//     the users' raw estimates (slurm.go; the profile pools the GPUs, an
//     optimistic simplification that can only favour this baseline).
//   - seed-formula: the source document's formula (estimate.SeedFormula).
//
// slurm-backfill and seed-formula give one number, so their "P90 coverage"
// is the share of tasks that started by that single estimate. A task an
// estimator says never starts counts as not covered, with its error taken
// against an estimate of zero (the estimator's own convention).
package sim
